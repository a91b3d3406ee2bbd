//! `gpuq requeue`: stop a running job and queue it again (it resumes from its
//! checkpoint), or queue an ended job again with a fresh retry budget.

use super::CmdResult;
use gpuq_api::Client;
use gpuq_core::JobState;

#[derive(clap::Args, Debug)]
pub struct RequeueArgs {
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print the jobs as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: RequeueArgs) -> CmdResult {
    super::cancel::for_each(client, &args.ids, args.json, "requeue", |job| {
        match job.state {
            JobState::Running => "stopping, then queued again (SIGTERM sent)".into(),
            s => s.to_string(),
        }
    })
    .await
}
