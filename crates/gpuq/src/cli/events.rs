//! `gpuq events`: follow job events and alerts as they happen (one JSON object
//! per line with `--json`), from the daemon's server-sent events stream.

use super::output::print_json_line;
use super::CmdResult;
use gpuq_api::{Client, FeedItem};
use gpuq_core::JobId;

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// Only this job's events.
    #[arg(long)]
    job: Option<JobId>,
    /// Start after this event id (printed with --json as `cursor`); `0.0` replays everything.
    #[arg(long)]
    after: Option<String>,
    /// Stop after this many events.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: EventsArgs) -> CmdResult {
    let mut seen = 0u64;
    let json = args.json;
    let limit = args.count;
    client
        .follow_events(args.after.as_deref(), args.job, |cursor, item| {
            if json {
                let mut value = serde_json::to_value(&item).unwrap_or_default();
                value["cursor"] = cursor.into();
                print_json_line(&value);
            } else {
                // One event, one line, whatever its detail holds.
                outln!("{}", super::output::field(&describe(&item)));
            }
            seen += 1;
            limit.is_none_or(|n| seen < n)
        })
        .await?;
    Ok(0)
}

fn describe(item: &FeedItem) -> String {
    let time = |at: i64| {
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(at.max(0) as u64),
        )
        .to_string()
    };
    match item {
        FeedItem::Job(e) => format!(
            "{}  job {:<6} {:<12} {}",
            time(e.at),
            e.job_id,
            e.kind,
            e.detail
        ),
        FeedItem::Alert(a) => format!(
            "{}  ALERT      {:<12} {}",
            time(a.alert.at),
            a.alert.kind.as_str(),
            a.alert.message
        ),
    }
}
