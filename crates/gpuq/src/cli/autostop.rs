//! `gpuq autostop [30m|off]`: stop an idle node (like `sky autostop`). Idle: no
//! job runs, or every running job's GPUs stayed under the threshold.

use super::output::print_json;
use super::CmdResult;
use gpuq_api::{AutostopRequest, AutostopStatus, Client};

#[derive(clap::Args, Debug)]
pub struct AutostopArgs {
    /// Idle time before acting (e.g. 30m), or `off`. Without it (and without
    /// --command or --dry-run): show the setting.
    idle_after: Option<String>,
    /// What to run when idle (e.g. "sudo shutdown -h now"); without one the queue is drained.
    #[arg(long)]
    command: Option<String>,
    /// Warn and say what would run, but run nothing (`--dry-run=false` turns it
    /// off). What is not given keeps its current value.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    dry_run: Option<bool>,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: AutostopArgs) -> CmdResult {
    let status = if args.idle_after.is_none() && args.command.is_none() && args.dry_run.is_none() {
        client.autostop().await?
    } else {
        client
            .set_autostop(&AutostopRequest {
                idle_after: args.idle_after.clone(),
                command: args.command.clone(),
                dry_run: args.dry_run,
            })
            .await?
    };
    if args.json {
        print_json(&status);
    } else {
        outln!("{}", describe(&status));
    }
    Ok(0)
}

fn describe(s: &AutostopStatus) -> String {
    let Some(after) = &s.idle_after else {
        return "autostop is off".into();
    };
    let what = s
        .command
        .as_ref()
        .map(|c| format!("run `{c}`"))
        .unwrap_or_else(|| "drain the queue".into());
    let idle = match s.idle_since {
        Some(t) => format!(
            "; idle for {}",
            super::output::span(gpuq_api::home::now_ms() - t)
        ),
        None => "; busy now".into(),
    };
    format!(
        "autostop: after {after} idle (no job, or every job's GPUs under {}%), warn {} before, then {what}{}{idle}",
        s.util_percent,
        s.warn_before,
        if s.dry_run { " (dry run: nothing runs)" } else { "" }
    )
}
