//! `gpuq profile ID [--steps 20]`: a `torch.profiler` capture of a running
//! job's next steps, made inside the job by the SDK (its `gpuq.should_stop()`
//! calls count the steps) and stored with the job's outputs: a Chrome trace
//! for Perfetto or TensorBoard, and the top operators and kernels as text.

use super::{parse_id, CliError, CmdResult};
use gpuq_api::Client;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// The running job.
    id: String,
    /// Training steps to capture.
    #[arg(long, default_value_t = 20)]
    steps: u32,
    /// How long to wait for the job to answer (e.g. 5m).
    #[arg(long, default_value = "5m")]
    timeout: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: ProfileArgs) -> CmdResult {
    let id = parse_id(&args.id)?;
    let timeout: gpuq_core::DurationSpec = args
        .timeout
        .parse()
        .map_err(|e| CliError::usage(format!("--timeout: {e}")))?;
    let asked = client.profile(id, args.steps).await?;
    errln!(
        "gpuq profile: asked job {id} for {} steps; waiting for it (its script must call gpuq.should_stop() each step)",
        args.steps
    );
    let deadline = Instant::now() + timeout.as_std();
    let status = loop {
        let s = client.profile_status(id, asked.request).await?;
        if s.done {
            break s;
        }
        let job = client.job(id).await?;
        if job.job.state.is_terminal() {
            return Err(CliError::failure(format!(
                "job {id} ended ({}) before it wrote the profile",
                job.job.state
            )));
        }
        if Instant::now() > deadline {
            return Err(CliError::failure(format!(
                "job {id} did not answer within {timeout}: its training loop must call gpuq.should_stop() \
                 once a step (the gpuq SDK watches for the request there), and torch must be importable"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if args.json {
        super::output::print_json(&status);
        return Ok(0);
    }
    if let Some(s) = &status.summary {
        outln!("{}", s.trim_end());
    }
    match &status.trace {
        Some(t) => outln!(
            "trace: {t} (open it in https://ui.perfetto.dev, chrome://tracing, or TensorBoard's profile plugin)"
        ),
        None => return Err(CliError::failure("the job could not make the capture (see above)")),
    }
    Ok(0)
}
