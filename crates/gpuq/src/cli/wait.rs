//! `gpuq wait`: block until jobs end.

use super::{job_exit_status, parse_id, CmdResult};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    #[arg(required = true)]
    ids: Vec<String>,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: WaitArgs) -> CmdResult {
    let ids = args
        .ids
        .iter()
        .map(|s| parse_id(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut jobs = Vec::new();
    for id in &ids {
        let job = loop {
            let j = client.wait(*id, 60).await?;
            if j.state.is_terminal() {
                break j;
            }
        };
        jobs.push(job);
    }
    if args.json {
        super::output::print_json(&jobs);
    } else {
        for j in &jobs {
            outln!(
                "job {}: {}{}",
                j.id,
                j.state,
                j.reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(match jobs.as_slice() {
        [one] => job_exit_status(one),
        many => i32::from(many.iter().any(|j| job_exit_status(j) != 0)),
    })
}
