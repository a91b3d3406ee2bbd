//! `gpuq drain` / `gpuq undrain`: stop starting new jobs for maintenance; running ones continue.

use super::CmdResult;
use gpuq_api::Client;

pub async fn run(client: &Client, drained: bool) -> CmdResult {
    let status = client.set_drained(drained).await?;
    if status.drained {
        println!(
            "queue drained: no new job starts; running jobs continue (gpuq undrain to resume)"
        );
    } else {
        println!("queue open: jobs start again");
    }
    Ok(0)
}
