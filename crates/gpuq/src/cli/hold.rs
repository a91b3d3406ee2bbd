//! `gpuq hold` / `gpuq release`: keep queued jobs from starting, and let them go.

use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct HoldArgs {
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print the jobs as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn hold(client: &Client, args: HoldArgs) -> CmdResult {
    super::cancel::for_each(client, &args.ids, args.json, "hold", |job| {
        format!("held by {}", job.held_by.as_deref().unwrap_or("?"))
    })
    .await
}

pub async fn release(client: &Client, args: HoldArgs) -> CmdResult {
    super::cancel::for_each(client, &args.ids, args.json, "release", |_| {
        "released".into()
    })
    .await
}
