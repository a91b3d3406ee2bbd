//! `gpuq ls`: the queue and recent jobs.

use super::output::{
    ago, colour_enabled, column_widths, fit, gpu_list, paint_state, print_json, print_table,
    shorten, span, terminal_width,
};
use super::{CliError, CmdResult};
use gpuq_api::home::now_ms;
use gpuq_api::Client;
use gpuq_core::JobState;

#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// Only these states (comma-separated), e.g. queued,running.
    #[arg(long)]
    state: Option<String>,
    /// Show at most this many jobs, newest first.
    #[arg(long, short = 'n', default_value_t = 50)]
    limit: u32,
    /// Every job, not only the newest.
    #[arg(long, short = 'a')]
    all: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: LsArgs) -> CmdResult {
    let mut states = Vec::new();
    for s in args
        .state
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
    {
        states.push(
            s.trim()
                .parse::<JobState>()
                .map_err(|e| CliError::usage(format!("--state: {e}")))?,
        );
    }
    let limit = (!args.all).then_some(args.limit);
    let jobs = client.list(&states, limit).await?;
    if args.json {
        print_json(&jobs);
        return Ok(0);
    }
    if jobs.is_empty() {
        outln!("no jobs");
        return Ok(0);
    }
    let now = now_ms();
    let colour = colour_enabled();
    // Why queued jobs wait: one scheduling pass on the daemon for all of them.
    let waiting: std::collections::HashMap<u64, String> =
        if jobs.iter().any(|j| j.state == JobState::Queued) {
            client
                .explain_queued()
                .await?
                .into_iter()
                .map(|e| (e.id, e.explanation))
                .collect()
        } else {
            Default::default()
        };
    let header = [
        "ID",
        "NAME",
        "USER",
        "STATE",
        "GPUS",
        "PRIO",
        "SUBMITTED",
        "RUNTIME",
        "COST",
        "COMMAND",
        "REASON",
    ];
    let mut reasons = Vec::with_capacity(jobs.len());
    let mut rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            // A queued job holds no GPUs, even when an earlier attempt did.
            let gpus = if j.gpus.is_empty() || j.state == JobState::Queued {
                j.gpus_requested.to_string()
            } else {
                format!("{} [{}]", j.gpus.len(), gpu_list(&j.gpus))
            };
            let runtime = match (j.started_at, j.ended_at) {
                (Some(s), Some(e)) => span(e - s),
                (Some(s), None) if j.state == JobState::Running => span(now - s),
                _ => String::new(),
            };
            reasons.push(match waiting.get(&j.id) {
                Some(why) if j.state == JobState::Queued => reason_of_queued(why).to_string(),
                _ => j.reason.clone().unwrap_or_default(),
            });
            vec![
                j.id.to_string(),
                shorten(j.display_name(), 20),
                j.user.clone(),
                paint_state(j.state, colour),
                gpus,
                j.priority.to_string(),
                ago(j.submitted_at, now),
                runtime,
                j.cost.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                shorten(&j.command, 40),
            ]
        })
        .collect();
    // REASON takes what the terminal has left (all of it in a pipe), at least 40.
    let before: usize = column_widths(&header[..header.len() - 1], &rows)
        .iter()
        .map(|w| w + 2)
        .sum();
    let room = terminal_width().map(|w| w.saturating_sub(before).max(40));
    for (row, reason) in rows.iter_mut().zip(reasons) {
        row.push(match room {
            Some(max) => fit(&reason, max),
            None => reason,
        });
    }
    print_table(&header, &rows);
    Ok(0)
}

/// The explanation without its lead-in ("waits: ", "is "): the column says it.
fn reason_of_queued(why: &str) -> &str {
    why.strip_prefix("waits: ")
        .or_else(|| why.strip_prefix("is "))
        .unwrap_or(why)
}
