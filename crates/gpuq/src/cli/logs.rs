//! `gpuq logs`: print an attempt's log; `-f` follows the job until it ends.

use super::output::safe::ByteFilter;
use super::{CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::JobId;

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    id: String,
    /// Follow: keep printing as the job writes, through its retries, until it ends.
    #[arg(short, long)]
    follow: bool,
    /// Which attempt [default: the latest].
    #[arg(long)]
    attempt: Option<u32>,
    /// Print another user's log exactly as written, escape sequences included
    /// (by default they are shown escaped; your own jobs' logs are always raw).
    #[arg(long)]
    raw: bool,
}

pub async fn run(client: &Client, args: LogsArgs) -> CmdResult {
    let id = super::arrays::job_id(client, &args.id).await?;
    let job = client.job(id).await?.job;
    // As the user names it: an array's task is `19.7`, not its internal id.
    let id = job.reference().to_string();
    if let Some(a) = args.attempt {
        if a == 0 || a > job.attempt {
            return Err(CliError::usage(format!(
                "job {id} has no attempt {a}; it has had {}",
                job.attempt
            )));
        }
    }
    // An empty output alone would not tell "no log yet" from "an empty log".
    if job.attempt == 0 {
        if job.state.is_terminal() {
            let reason = job.reason.map(|r| format!(": {r}")).unwrap_or_default();
            errln!(
                "gpuq: job {id} never started, so it has no log ({}{reason})",
                job.state
            );
            return Ok(0);
        }
        let why = format!(
            "job {id} has not started yet (it is {}; `gpuq explain {id}` says why)",
            job.state
        );
        if !args.follow {
            errln!("gpuq: {why}; no log yet");
            return Ok(0);
        }
        errln!("gpuq: {why}; its log follows once it starts");
    }
    let attempt = args.attempt.unwrap_or(job.attempt.max(1));
    if args.attempt.is_none() && job.attempt > 1 {
        let earlier: Vec<String> = (1..job.attempt).map(|a| a.to_string()).collect();
        let of = if job.state.is_terminal() {
            format!(" of {}", job.attempt)
        } else {
            String::new()
        };
        errln!(
            "gpuq: job {id}: attempt {}{of}; earlier: --attempt {}",
            job.attempt,
            earlier.join(", ")
        );
    }
    // Someone else's output could drive this terminal (title, clipboard, screen).
    let raw = args.raw || client.whoami().await?.user == job.user;
    let across = args.follow && args.attempt.is_none();
    follow(client, job.id, attempt, across, raw).await?;
    Ok(0)
}

/// Prints the log from `attempt` on. With `across_attempts`, moves on to later
/// attempts and returns only when the job has ended. Without `raw`, control
/// characters are shown escaped (see `output::safe`).
pub async fn follow(
    client: &Client,
    id: JobId,
    attempt: u32,
    across_attempts: bool,
    raw: bool,
) -> Result<(), CliError> {
    let mut filter = (!raw).then(ByteFilter::default);
    let result = follow_into(client, id, attempt, across_attempts, &mut filter).await;
    if let Some(f) = filter.as_mut() {
        super::output::write_stdout_bytes(&f.finish());
    }
    result
}

async fn follow_into(
    client: &Client,
    id: JobId,
    mut attempt: u32,
    across_attempts: bool,
    filter: &mut Option<ByteFilter>,
) -> Result<(), CliError> {
    let mut offset = 0u64;
    loop {
        let chunk = match client.log(id, Some(attempt), offset, across_attempts).await {
            Ok(c) => c,
            Err(e) => {
                // A job that ended before its first attempt (its environment's
                // build failed, a dependency failed) has no log: its end says why.
                let job = client.job(id).await?.job;
                if job.attempt == 0 && job.state.is_terminal() {
                    return Ok(());
                }
                return Err(e.into());
            }
        };
        if !chunk.data.is_empty() {
            match filter.as_mut() {
                Some(f) => super::output::write_stdout_bytes(&f.push(&chunk.data)),
                None => super::output::write_stdout_bytes(&chunk.data),
            }
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
                errln!("gpuq: job {} attempt {attempt}", job.reference());
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
