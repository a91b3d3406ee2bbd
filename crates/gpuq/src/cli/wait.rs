//! `gpuq wait`: block until jobs end. An array's id waits for every task.

use super::arrays::{parse_ref, target, Target};
use super::{job_exit_status, CmdResult};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    #[arg(required = true)]
    ids: Vec<String>,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: WaitArgs) -> CmdResult {
    for s in &args.ids {
        parse_ref(s)?;
    }
    let mut jobs = Vec::new();
    let mut lines = Vec::new();
    let mut arrays = 0;
    for s in &args.ids {
        match target(client, s).await? {
            Target::Job(id) => {
                let job = loop {
                    let j = client.wait(id, 60).await?;
                    if j.state.is_terminal() {
                        break j;
                    }
                };
                lines.push(format!(
                    "job {}: {}{}",
                    job.reference(),
                    job.state,
                    job.reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
                jobs.push(job);
            }
            Target::Array(a) => {
                arrays += 1;
                while !client.wait_array(a.id, 60).await?.ended() {}
                let a = client.array(a.id, true).await?;
                lines.push(format!("array {}: {}", a.id, a.counts_text()));
                for t in a.tasks.iter().flatten() {
                    if t.state != gpuq_core::JobState::Succeeded {
                        lines.push(format!(
                            "  task {}: {}{}",
                            t.reference(),
                            t.state,
                            t.reason
                                .as_ref()
                                .map(|r| format!(" ({r})"))
                                .unwrap_or_default()
                        ));
                    }
                }
                jobs.extend(a.tasks.unwrap_or_default());
            }
        }
    }
    if args.json {
        super::output::print_json(&jobs);
    } else {
        for l in &lines {
            outln!("{l}");
        }
    }
    // One job: its own status. An array, or several: 0 only if every job succeeded.
    Ok(match jobs.as_slice() {
        [one] if arrays == 0 => job_exit_status(one),
        many => i32::from(many.iter().any(|j| job_exit_status(j) != 0)),
    })
}
