//! `gpuq schedules`: the cron schedules of gpuq.toml and their next runs.

use super::output::{print_json, print_table};
use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct SchedulesArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: SchedulesArgs) -> CmdResult {
    let list = client.schedules().await?;
    if args.json {
        print_json(&list);
        return Ok(0);
    }
    if list.is_empty() {
        outln!("no schedules ([[schedules]] in gpuq.toml)");
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            let action = match (&s.spec, &s.user) {
                (Some(spec), Some(user)) => format!("{} {spec} as {user}", s.action),
                (Some(spec), None) => format!("{} {spec}", s.action),
                _ => s.action.clone(),
            };
            vec![
                s.name.clone(),
                format!("{} ({})", s.cron, s.timezone),
                action,
                s.next_local.join(", "),
                s.last_run
                    .map(|t| super::output::ago(t, gpuq_api::home::now_ms()))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(&["NAME", "CRON", "ACTION", "NEXT RUNS", "LAST RUN"], &rows);
    Ok(0)
}
