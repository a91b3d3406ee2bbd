//! `gpuq gpus`: the GPUs and who holds them.

use super::output::{print_json, print_table};
use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct GpusArgs {
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: GpusArgs) -> CmdResult {
    let gpus = client.gpus().await?;
    if args.json {
        print_json(&gpus);
        return Ok(0);
    }
    if gpus.is_empty() {
        let info = client.info().await?;
        println!("no GPUs: {}", info.gpu_discovery);
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = gpus
        .iter()
        .map(|g| {
            vec![
                g.index.to_string(),
                g.model.clone(),
                format!("{} MiB", g.memory_mib),
                g.job.map(|j| j.to_string()).unwrap_or_else(|| "-".into()),
                g.user.clone().unwrap_or_default(),
                g.job_name.clone().unwrap_or_default(),
                g.uuid.clone(),
            ]
        })
        .collect();
    print_table(
        &["GPU", "MODEL", "MEMORY", "JOB", "USER", "NAME", "UUID"],
        &rows,
    );
    Ok(0)
}
