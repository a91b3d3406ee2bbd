//! `gpuq cancel`: stop jobs (queued ones at once; running ones by the stop protocol).

use super::{parse_id, CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::Job;

#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print the jobs as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: CancelArgs) -> CmdResult {
    for_each(client, &args.ids, args.json, "cancel", |job| {
        if job.state.is_terminal() {
            job.state.to_string()
        } else {
            "stopping (SIGTERM sent)".into()
        }
    })
    .await
}

/// Applies a job action (cancel, requeue, hold, release) to each id, printing
/// one line per job; the exit status is the worst of the failures.
pub async fn for_each(
    client: &Client,
    ids: &[String],
    json: bool,
    action: &str,
    describe: impl Fn(&Job) -> String,
) -> CmdResult {
    let ids = ids
        .iter()
        .map(|s| parse_id(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut status = 0;
    let mut done = Vec::new();
    for id in ids {
        match client.job_action(id, action).await {
            Ok(job) if json => done.push(job),
            Ok(job) => outln!("job {id}: {}", describe(&job)),
            Err(e) => {
                let e = CliError::from(e);
                errln!("gpuq: {}", e.message);
                status = status.max(e.code);
            }
        }
    }
    if json {
        super::output::print_json(&done);
    }
    Ok(status)
}
