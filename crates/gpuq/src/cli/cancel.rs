//! `gpuq cancel`: stop jobs (queued ones at once; running ones by the stop protocol).

use super::arrays::{parse_ref, target, Target};
use super::{CliError, CmdResult};
use gpuq_api::arrays::ArrayDetail;
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
/// one line per job; the exit status is the worst of the failures. An array's
/// id acts on the whole array (its tasks the action applies to), `ID.K` on
/// task K; with `--json`, every job acted on is printed.
pub async fn for_each(
    client: &Client,
    ids: &[String],
    json: bool,
    action: &str,
    describe: impl Fn(&Job) -> String,
) -> CmdResult {
    // Every argument is read before anything is done: a typo acts on nothing.
    for s in ids {
        parse_ref(s)?;
    }
    let mut status = 0;
    let mut done = Vec::new();
    for s in ids {
        let acted = match target(client, s).await {
            Ok(Target::Job(id)) => client.job_action(id, action).await.map(|job| {
                if !json {
                    outln!("job {}: {}", job.reference(), describe(&job));
                }
                vec![job]
            }),
            Ok(Target::Array(a)) => match client.array_action(a.id, action).await {
                Ok(a) if json => tasks_acted_on(client, &a).await,
                Ok(a) => {
                    outln!("array {}: {}", a.id, array_outcome(action, &a));
                    Ok(Vec::new())
                }
                Err(e) => Err(e),
            },
            Err(e) => {
                errln!("gpuq: {}", e.message);
                status = status.max(e.code);
                continue;
            }
        };
        match acted {
            Ok(jobs) => done.extend(jobs),
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

/// The tasks an array action acted on, as they are now.
async fn tasks_acted_on(client: &Client, a: &ArrayDetail) -> Result<Vec<Job>, gpuq_api::ApiError> {
    let acted = a.acted_on.clone().unwrap_or_default();
    let all = client.array(a.id, true).await?;
    Ok(all
        .tasks
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.array_index.is_some_and(|k| acted.contains(&k)))
        .collect())
}

/// "4 tasks [2-5] cancelled; 2 running stopping (SIGTERM sent)"
fn array_outcome(action: &str, a: &ArrayDetail) -> String {
    let acted = a.acted_on.clone().unwrap_or_default();
    let tasks = format!(
        "{} [{}]",
        gpuq_core::plural(acted.len() as u64, "task"),
        gpuq_core::array::compact(&acted)
    );
    let running = a.counts.get("running").copied().unwrap_or(0);
    match action {
        "cancel" if running > 0 => {
            format!("{tasks} cancelled; {running} running stopping (SIGTERM sent)")
        }
        "cancel" => format!("{tasks} cancelled"),
        "hold" => format!("{tasks} held"),
        "release" => format!("{tasks} released"),
        "requeue" => format!("{tasks} queued again"),
        other => format!("{tasks}: {other} done"),
    }
}
