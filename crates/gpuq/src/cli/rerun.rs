//! `gpuq rerun ID`: the job's spec submitted again, from its directory with the
//! environment it was given, and a fresh capture; a warning names what changed
//! in its code since (commit, uncommitted changes, untracked files, lock file).

use super::repro::{capture_for, compare};
use super::{CliError, CmdResult};
use gpuq_api::repro::RerunRequest;
use gpuq_api::Client;
use std::io::IsTerminal;

#[derive(clap::Args, Debug)]
pub struct RerunArgs {
    id: String,
    /// Do not ask before rerunning changed code (asked only on a terminal).
    #[arg(long, short)]
    yes: bool,
    /// Do not record the code again (nor check it for changes).
    #[arg(long)]
    no_repro: bool,
    /// Print the new job as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: RerunArgs) -> CmdResult {
    let id = super::arrays::job_id(client, &args.id).await?;
    let view = client.repro(id).await?;
    let job = client.job(id).await?.job;
    let fresh = capture_for(&job.spec, &job.cwd, args.no_repro);
    let mut changed = false;
    match (&view.repro, &fresh) {
        (Some(old), Some(new)) => {
            let c = compare::changes(old, new);
            if !c.code.is_empty() {
                errln!(
                    "gpuq: warning: code changed since job {id}: {}",
                    c.code.join("; ")
                );
            }
            if !c.environment.is_empty() {
                errln!(
                    "gpuq: warning: environment changed since job {id}: {}",
                    c.environment.join("; ")
                );
            }
            changed = !(c.code.is_empty() && c.environment.is_empty());
        }
        (None, Some(_)) => errln!(
            "gpuq: note: job {id} has no record of its code (submitted with --no-repro?); \
             whether it changed is not known"
        ),
        (_, None) => {}
    }
    // Rerunning is what was asked: only a person at a terminal is asked to confirm.
    if changed && !args.yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        super::output::write_stderr(format_args!(
            "gpuq: rerun job {id} with the code as it is now? [Y/n] "
        ));
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if matches!(answer.trim().to_ascii_lowercase().as_str(), "n" | "no") {
            return Err(CliError::failure(format!("job {id} not rerun")));
        }
    }
    let new = client.rerun(id, &RerunRequest { repro: fresh }).await?;
    if args.json {
        super::output::print_json(&new);
    } else {
        outln!("{}", new.id);
    }
    Ok(0)
}
