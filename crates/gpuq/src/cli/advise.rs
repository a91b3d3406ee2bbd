//! `gpuq advise ID`: right-sizing from the job's telemetry and the price catalog.

use super::output::{print_json, print_table};
use super::CmdResult;
use gpuq_api::Client;

#[derive(clap::Args, Debug)]
pub struct AdviseArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(client: &Client, args: AdviseArgs) -> CmdResult {
    let id = super::arrays::job_id(client, &args.id).await?;
    let a = client.advice(id).await?;
    if args.json {
        print_json(&a);
        return Ok(0);
    }
    outln!("job {}: {}", a.job, a.basis);
    for h in &a.hints {
        outln!("- {h}");
    }
    if !a.options.is_empty() {
        outln!("\ncards that fit its memory (with a 20% margin), cheapest run first:");
        let rows: Vec<Vec<String>> = a
            .options
            .iter()
            .map(|o| {
                vec![
                    o.gpu_model.clone(),
                    format!("{} GiB", o.memory_gib),
                    format!("{}/GPU-h", o.gpu_hour),
                    format!("×{:.2}", o.time_factor),
                    o.estimated_cost.to_string(),
                    o.cost_factor.map_or("-".into(), |f| format!("×{f:.2}")),
                    o.offer.clone(),
                ]
            })
            .collect();
        print_table(
            &[
                "GPU",
                "MEMORY",
                "PRICE",
                "TIME",
                "EST. COST",
                "VS NOW",
                "CHEAPEST OFFER",
            ],
            &rows,
        );
        outln!("time scales with the card's speed for the share of the run the GPU was busy; catalog prices: gpuq's built-in list (see docs/cost.md)");
    } else if a.hints.is_empty() {
        outln!("nothing to suggest");
    }
    Ok(0)
}
