//! `gpuq explain`: why a job waits, in a sentence.

use super::{parse_id, CmdResult};
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: ExplainArgs) -> CmdResult {
    let id = parse_id(&args.id)?;
    let e = client.explain(id).await?;
    if args.json {
        super::output::print_json(&e);
    } else {
        outln!("job {id} {}", e.explanation);
    }
    Ok(0)
}
