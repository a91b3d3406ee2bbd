//! `gpuq prices [--gpu MODEL]`: the price catalog the daemon uses, with sources.

use super::output::{print_json, print_table};
use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct PricesArgs {
    /// Only this GPU model (e.g. A100-80GB, H100, L4).
    #[arg(long)]
    gpu: Option<String>,
    /// Show each row's source and date.
    #[arg(long)]
    sources: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: PricesArgs) -> CmdResult {
    let mut rows = client.prices(args.gpu.as_deref()).await?;
    if args.json {
        print_json(&rows);
        return Ok(0);
    }
    rows.sort_by_key(|r| r.per_gpu_hour(false));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.key(),
                format!("{} × {}", r.gpus, r.gpu_model),
                r.on_demand.to_string(),
                r.spot.map_or("-".into(), |s| s.to_string()),
                r.per_gpu_hour(false).map_or("-".into(), |p| p.to_string()),
            ];
            if args.sources {
                row.push(format!("{} ({})", r.source, r.as_of));
            }
            row
        })
        .collect();
    let mut header = vec![
        "INSTANCE (cost.instance)",
        "GPUS",
        "ON-DEMAND/H",
        "SPOT/H",
        "PER GPU-H",
    ];
    if args.sources {
        header.push("SOURCE (AS OF)");
    }
    print_table(&header, &table);
    outln!(
        "prices move: check the provider before relying on one; override rows with cost.catalog"
    );
    Ok(0)
}
