//! `gpuq usage`: GPU-hours per user and project, and where each user stands in fair share.

use super::output::{fixed, long_duration, print_json, print_table};
use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct UsageArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: UsageArgs) -> CmdResult {
    let usage = client.usage().await?;
    if args.json {
        print_json(&usage);
        return Ok(0);
    }
    let quota = |q: Option<u32>| q.map(|q| q.to_string()).unwrap_or_else(|| "-".into());
    let mut users = usage.users.clone();
    users.sort_by(|a, b| a.standing.total_cmp(&b.standing));
    let rows: Vec<Vec<String>> = users
        .iter()
        .enumerate()
        .map(|(rank, u)| {
            vec![
                u.user.clone(),
                fixed(u.gpu_hours, 2),
                fixed(u.decayed_gpu_hours, 2),
                format!("{}", u.share),
                format!("#{}", rank + 1),
                u.running_gpus.to_string(),
                quota(u.max_gpus),
                u.queued_jobs.to_string(),
            ]
        })
        .collect();
    outln!(
        "users (fair share: usage halves every {}; #1 goes first within a priority class)",
        usage
            .half_life
            .parse::<gpuq_core::DurationSpec>()
            .map_or(usage.half_life.clone(), |d| long_duration(d.as_millis()))
    );
    print_table(
        &[
            "USER",
            "GPU-HOURS",
            "DECAYED",
            "SHARE",
            "TURN",
            "GPUS NOW",
            "MAX GPUS",
            "QUEUED",
        ],
        &rows,
    );
    if !usage.projects.is_empty() {
        outln!();
        let rows: Vec<Vec<String>> = usage
            .projects
            .iter()
            .map(|p| {
                vec![
                    p.project.clone(),
                    fixed(p.gpu_hours, 2),
                    p.running_gpus.to_string(),
                    quota(p.max_gpus),
                ]
            })
            .collect();
        print_table(&["PROJECT", "GPU-HOURS", "GPUS NOW", "MAX GPUS"], &rows);
    }
    Ok(0)
}
