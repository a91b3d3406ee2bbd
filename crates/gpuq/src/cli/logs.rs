//! `gpuq logs`: print an attempt's log; `-f` follows the job until it ends.

use super::{parse_id, CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::JobId;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    id: String,
    /// Follow: keep printing as the job writes, through its retries, until it ends.
    #[arg(short, long)]
    follow: bool,
    /// Which attempt [default: the latest].
    #[arg(long)]
    attempt: Option<u32>,
}

pub async fn run(client: &Client, args: LogsArgs) -> CmdResult {
    let id = parse_id(&args.id)?;
    let job = client.job(id).await?;
    let attempt = args.attempt.unwrap_or(job.job.attempt.max(1));
    if let Some(a) = args.attempt {
        if a == 0 || a > job.job.attempt {
            return Err(CliError::usage(format!(
                "job {id} has no attempt {a}; it has had {}",
                job.job.attempt
            )));
        }
    }
    follow(client, id, attempt, args.follow && args.attempt.is_none()).await?;
    Ok(0)
}

/// Prints the log from `attempt` on. With `across_attempts`, moves on to later
/// attempts and returns only when the job has ended.
pub async fn follow(
    client: &Client,
    id: JobId,
    mut attempt: u32,
    across_attempts: bool,
) -> Result<(), CliError> {
    let mut offset = 0u64;
    let mut out = std::io::stdout();
    loop {
        let chunk = client
            .log(id, Some(attempt), offset, across_attempts)
            .await?;
        if !chunk.data.is_empty() {
            out.write_all(&chunk.data)
                .and_then(|_| out.flush())
                .map_err(|e| CliError::failure(e.to_string()))?;
        }
        offset = chunk.next_offset;
        if !across_attempts {
            if chunk.complete || chunk.data.is_empty() {
                return Ok(());
            }
            continue;
        }
        if chunk.complete {
            let detail = client.job(id).await?;
            let job = &detail.job;
            if job.state.is_terminal() && job.attempt <= attempt {
                return Ok(());
            }
            if job.attempt > attempt {
                attempt += 1;
                offset = 0;
                eprintln!("gpuq: job {id} attempt {attempt}");
            } else {
                // Requeued, not started again yet: the event stream says when the job
                // next changes. The cursor starts after the last event read above (and
                // after every alert), so a change in between is not missed.
                let last = detail.events.last().map_or(0, |e| e.seq);
                let cursor = format!("{last}.{}", i64::MAX);
                client
                    .follow_events(Some(&cursor), Some(id), |_, _| false)
                    .await?;
            }
        }
    }
}
