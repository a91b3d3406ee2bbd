//! `gpuq ls`: the queue and recent jobs, each job array as one row;
//! `gpuq ls ARRAY` lists the array's tasks.

use super::arrays::{array_label, parse_ref};
use super::output::{
    ago, colour_enabled, column_widths, field, fit, gpu_list, paint_state, print_json, print_table,
    shorten, span, terminal_width,
};
use super::{CliError, CmdResult};
use gpuq_api::arrays::ArrayDetail;
use gpuq_api::home::now_ms;
use gpuq_api::Client;
use gpuq_core::{Job, JobRef, JobState};
use std::collections::HashMap;

#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// Only these states (comma-separated), e.g. queued,running.
    #[arg(long)]
    state: Option<String>,
    /// Show at most this many jobs, newest first (an array is one).
    #[arg(long, short = 'n', default_value_t = 50)]
    limit: u32,
    /// Every job, not only the newest.
    #[arg(long, short = 'a')]
    all: bool,
    /// Every job as JSON, an array's tasks one by one (with `array_id` and `array_index`).
    #[arg(long)]
    json: bool,
    /// An array's id: list its tasks (ID.K for each).
    #[arg(value_name = "ARRAY")]
    array: Option<String>,
}

const HEADER: [&str; 11] = [
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
    if let Some(array) = &args.array {
        return list_tasks(client, array, &states, limit, args.json).await;
    }
    if args.json {
        print_json(&client.list(&states, limit).await?);
        return Ok(0);
    }
    let rows = client.listing(&states, limit).await?;
    if rows.is_empty() {
        outln!("no jobs");
        return Ok(0);
    }
    let waiting = waiting(client, rows.iter().map(|r| &r.job)).await?;
    let now = now_ms();
    let colour = colour_enabled();
    let (cells, reasons): (Vec<Vec<String>>, Vec<String>) = rows
        .iter()
        .map(|r| match &r.array {
            Some(a) => array_row(&r.job, a, now, colour),
            None => job_row(&r.job, &waiting, now, colour),
        })
        .unzip();
    print_with_reasons(cells, reasons);
    Ok(0)
}

/// `gpuq ls ARRAY`: the array's tasks, by index.
async fn list_tasks(
    client: &Client,
    array: &str,
    states: &[JobState],
    limit: Option<u32>,
    json: bool,
) -> CmdResult {
    let id = match parse_ref(array)? {
        JobRef::Job(id) => id,
        JobRef::Task { array, index } => {
            return Err(CliError::usage(format!(
                "gpuq ls takes an array's id ({array}), not a task's; gpuq show {array}.{index} shows the task"
            )))
        }
    };
    let a = client.array(id, true).await?;
    let tasks: Vec<Job> = a
        .tasks
        .unwrap_or_default()
        .into_iter()
        .filter(|t| states.is_empty() || states.contains(&t.state))
        .take(limit.map_or(usize::MAX, |l| l as usize))
        .collect();
    if json {
        print_json(&tasks);
        return Ok(0);
    }
    if tasks.is_empty() {
        outln!("no tasks");
        return Ok(0);
    }
    let waiting = waiting(client, tasks.iter()).await?;
    let now = now_ms();
    let colour = colour_enabled();
    let (cells, reasons) = tasks
        .iter()
        .map(|j| job_row(j, &waiting, now, colour))
        .unzip();
    print_with_reasons(cells, reasons);
    Ok(0)
}

/// Why queued jobs wait: one scheduling pass on the daemon for all of them.
pub(super) async fn waiting<'a>(
    client: &Client,
    mut jobs: impl Iterator<Item = &'a Job>,
) -> Result<HashMap<u64, String>, CliError> {
    Ok(if jobs.any(|j| j.state == JobState::Queued) {
        client
            .explain_queued()
            .await?
            .into_iter()
            .map(|e| (e.id, e.explanation))
            .collect()
    } else {
        Default::default()
    })
}

fn job_row(
    j: &Job,
    waiting: &HashMap<u64, String>,
    now: i64,
    colour: bool,
) -> (Vec<String>, String) {
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
    let reason = match waiting.get(&j.id) {
        Some(why) if j.state == JobState::Queued => reason_of_queued(why).to_string(),
        _ => j.reason.clone().unwrap_or_default(),
    };
    (
        vec![
            j.reference().to_string(),
            shorten(j.display_name(), 20),
            j.user.clone(),
            paint_state(j.state, colour),
            gpus,
            j.priority.to_string(),
            ago(j.submitted_at, now),
            runtime,
            j.cost.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            // Cleaned before it is cut, so the cut counts what the terminal shows.
            shorten(&field(&j.command), 40),
        ],
        reason,
    )
}

/// One row for a whole array: `12.[0-99%8]`, its state in one word, GPUs per
/// task, and its tasks counted by state as the reason.
fn array_row(first: &Job, a: &ArrayDetail, now: i64, colour: bool) -> (Vec<String>, String) {
    (
        vec![
            array_label(a),
            shorten(a.name.as_deref().unwrap_or(""), 20),
            a.user.clone(),
            paint_state(a.state(), colour),
            format!("{} each", first.gpus_requested),
            first.priority.to_string(),
            ago(a.submitted_at, now),
            String::new(),
            "-".into(),
            shorten(&field(&a.command), 40),
        ],
        format!(
            "{}: {} (gpuq ls {})",
            gpuq_core::plural(a.size.into(), "task"),
            a.counts_text(),
            a.id
        ),
    )
}

/// REASON takes what the terminal has left (all of it in a pipe), at least 40.
fn print_with_reasons(mut rows: Vec<Vec<String>>, reasons: Vec<String>) {
    let before: usize = column_widths(&HEADER[..HEADER.len() - 1], &rows)
        .iter()
        .map(|w| w + 2)
        .sum();
    let room = terminal_width().map(|w| w.saturating_sub(before).max(40));
    for (row, reason) in rows.iter_mut().zip(reasons) {
        row.push(match room {
            Some(max) => fit(&field(&reason), max),
            None => reason,
        });
    }
    print_table(&HEADER, &rows);
}

/// The explanation without its lead-in ("waits: ", "is "): the column says it.
fn reason_of_queued(why: &str) -> &str {
    why.strip_prefix("waits: ")
        .or_else(|| why.strip_prefix("is "))
        .unwrap_or(why)
}
