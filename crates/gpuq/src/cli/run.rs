//! `gpuq run`: submit, stream the log of every attempt, exit with the job's status.
//! Ctrl-C cancels the job (like srun) and keeps streaming until it has ended.

use super::{job_exit_status, submit, CliError, CmdResult};
use gpuq_api::Client;
use std::io::Write;

pub async fn run(client: &Client, args: submit::SubmitArgs) -> CmdResult {
    if args.to_spec()?.array.is_some() {
        return Err(CliError::usage(
            "gpuq run follows one job's log; queue an array with `gpuq submit --array …` (it prints \
             the array's id), then `gpuq wait ID` (0 once every task succeeded) or `gpuq logs ID.K`",
        ));
    }
    let job = submit::submit(client, &args).await?;
    errln!("gpuq: job {} queued", job.id);
    let follow = super::logs::follow(client, job.id, 1, true, true);
    tokio::pin!(follow);
    let mut cancelled = false;
    loop {
        tokio::select! {
            r = &mut follow => { r?; break; }
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                errln!("gpuq: cancelling job {} (Ctrl-C)", job.id);
                client.cancel(job.id).await?;
            }
        }
    }
    let _ = std::io::stdout().flush();
    let end = loop {
        let j = client.wait(job.id, 60).await?;
        if j.state.is_terminal() {
            break j;
        }
    };
    if args.json {
        super::output::print_json(&end);
    }
    let reason = end.reason.as_deref().unwrap_or("");
    errln!("gpuq: job {} {} ({reason})", end.id, end.state);
    Ok(job_exit_status(&end))
}
