//! `gpuq cancel`: stop jobs (queued ones at once; running ones by the stop protocol).

use super::{parse_id, CmdResult};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    #[arg(required = true)]
    ids: Vec<String>,
}

pub async fn run(client: &Client, args: CancelArgs) -> CmdResult {
    let ids = args
        .ids
        .iter()
        .map(|s| parse_id(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut status = 0;
    for id in ids {
        match client.cancel(id).await {
            Ok(job) => println!(
                "job {id}: {}",
                if job.state.is_terminal() {
                    job.state.to_string()
                } else {
                    "stopping (SIGTERM sent)".into()
                }
            ),
            Err(e) => {
                let e = super::CliError::from(e);
                eprintln!("gpuq: {}", e.message);
                status = status.max(e.code);
            }
        }
    }
    Ok(status)
}
