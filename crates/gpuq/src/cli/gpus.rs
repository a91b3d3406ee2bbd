//! `gpuq gpus`: every GPU like nvidia-smi shows it, plus who holds it.

use super::output::{print_json, print_table};
use super::CmdResult;
use gpuq_api::{Client, GpuStatus};

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
        outln!("no GPUs: {}", info.gpu_discovery);
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = gpus.iter().map(row).collect();
    print_table(
        &[
            "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "JOB", "USER", "NAME",
        ],
        &rows,
    );
    // Processes outside gpuq hold memory the scheduler does not know about: say so.
    for g in &gpus {
        for p in g.processes.iter().filter(|p| p.job.is_none()) {
            outln!(
                "note: GPU {}: pid {} ({}) is not a gpuq job",
                g.index,
                p.pid,
                p.memory_mib
                    .map(|m| format!("{m} MiB"))
                    .unwrap_or_else(|| "memory unknown".into())
            );
        }
    }
    Ok(0)
}

fn row(g: &GpuStatus) -> Vec<String> {
    let r = g.reading.as_ref();
    let dash = || "-".to_string();
    let memory = match r.and_then(|r| r.memory_used_mib) {
        Some(used) => format!("{used} / {} MiB", g.memory_mib),
        None => format!("{} MiB", g.memory_mib),
    };
    let mut util = r
        .and_then(|r| r.util_percent)
        .map(|u| format!("{u:.0}%"))
        .unwrap_or_else(dash);
    if r.is_some_and(|r| r.lost) {
        util = "LOST".into();
    }
    vec![
        g.index.to_string(),
        g.model.clone(),
        util,
        memory,
        r.and_then(|r| r.temperature_c)
            .map(|t| format!("{t}C"))
            .unwrap_or_else(dash),
        r.and_then(|r| r.power_w)
            .map(|p| format!("{p:.0}W"))
            .unwrap_or_else(dash),
        g.job.map(|j| j.to_string()).unwrap_or_else(dash),
        g.user.clone().unwrap_or_default(),
        g.job_name.clone().unwrap_or_default(),
    ]
}
