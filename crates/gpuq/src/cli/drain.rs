//! `gpuq drain` / `gpuq undrain`: stop starting new jobs for maintenance; running ones continue.

use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// Print the queue status as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, drained: bool, args: DrainArgs) -> CmdResult {
    let status = client.set_drained(drained).await?;
    if args.json {
        super::output::print_json(&status);
    } else if status.drained {
        outln!("queue drained: no new job starts; running jobs continue (gpuq undrain to resume)");
    } else {
        outln!("queue open: jobs start again");
    }
    Ok(0)
}
