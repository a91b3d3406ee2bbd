//! `gpuq doctor ID`: a running job, from what the daemon measures: is its
//! process on the GPUs it holds (NVML's process list), is it input-bound
//! (its GPUs mostly idle), is its GPU memory near full.

use super::{Check, Report};
use crate::cli::CliError;
use gpuq_api::Client;
use gpuq_core::JobState;
use serde_json::{json, Value};

/// Utilisation under this, on average, reads as a GPU waiting for input.
const INPUT_BOUND_PERCENT: f64 = 50.0;
/// Memory in use above this share is one larger batch from out-of-memory.
const MEMORY_FULL: f64 = 0.95;

pub async fn look(client: &Client, id: u64) -> Result<Report, CliError> {
    let detail = client.job(id).await?;
    let job = &detail.job;
    if job.state != JobState::Running {
        return Err(CliError::usage(format!(
            "job {id} is {}: `gpuq doctor ID` looks at a running job (`gpuq doctor` checks the node)",
            job.state
        )));
    }
    let info = client.info().await?;
    let mut checks = Vec::new();
    if job.gpus.is_empty() {
        checks.push(Check::new(
            "on_gpu",
            "The job's processes on its GPUs",
            "skip",
            Value::Null,
            "the job holds no GPU".into(),
            "",
        ));
        return Ok(Report {
            version: 1,
            node: job.node.clone().unwrap_or(info.node),
            python: None,
            job: id,
            checks,
        });
    }
    let gpus: Vec<_> = client
        .gpus()
        .await?
        .into_iter()
        .filter(|g| job.gpus.contains(&g.index))
        .collect();
    let ours: Vec<_> = gpus
        .iter()
        .flat_map(|g| g.processes.iter())
        .filter(|p| p.job == Some(id))
        .collect();
    let held: Vec<String> = job.gpus.iter().map(u32::to_string).collect();
    checks.push(if !info.nvml {
        Check::new(
            "on_gpu",
            "The job's processes on its GPUs",
            "skip",
            Value::Null,
            format!("no process list on this node ({}): NVML lists them", info.gpu_discovery),
            "",
        )
    } else if ours.is_empty() {
        Check::new(
            "on_gpu",
            "The job's processes on its GPUs",
            "fail",
            json!(0),
            format!("it holds GPU {} but none of its processes uses them: it computes on the CPU, or has not started on the GPU", held.join(",")),
            "check that its Python sees the GPUs (`gpuq doctor --gpus N`: torch.cuda.is_available()), and that the model and batches are moved .to('cuda')",
        )
    } else {
        let on: std::collections::BTreeSet<u32> = ours.iter().map(|p| p.gpu).collect();
        let idle: Vec<String> = job.gpus.iter().filter(|g| !on.contains(g)).map(u32::to_string).collect();
        if idle.is_empty() {
            Check::new(
                "on_gpu",
                "The job's processes on its GPUs",
                "ok",
                json!(ours.len()),
                format!("{} process(es) of the job on GPU {}", ours.len(), held.join(",")),
                "",
            )
        } else {
            Check::new(
                "on_gpu",
                "The job's processes on its GPUs",
                "warn",
                json!(ours.len()),
                format!("GPU {} held but unused by the job", idle.join(",")),
                "a job that uses fewer GPUs than it holds should ask for fewer (--gpus), or launch one process per GPU (torchrun --nproc-per-node)",
            )
        }
    });
    let usage = detail.gpu_usage.as_ref();
    match usage.and_then(|u| u.util_avg_percent) {
        Some(avg) if avg < INPUT_BOUND_PERCENT => checks.push(Check::new(
            "input_bound",
            "Is it input-bound",
            "warn",
            json!(avg),
            format!(
                "its GPUs averaged {avg:.0}% busy (peak {:.0}%): they wait for data most of the time",
                usage.and_then(|u| u.util_peak_percent).unwrap_or(avg)
            ),
            "raise DataLoader num_workers (about the CPU cores per GPU), set pin_memory=True and persistent_workers=True, \
             move decoding and augmentation to the GPU, or cache the data set on local disk; `gpuq tune` measures these",
        )),
        Some(avg) => checks.push(Check::new(
            "input_bound",
            "Is it input-bound",
            "ok",
            json!(avg),
            format!("its GPUs averaged {avg:.0}% busy"),
            "",
        )),
        None => checks.push(Check::new(
            "input_bound",
            "Is it input-bound",
            "skip",
            Value::Null,
            "no utilisation reading for the job yet".into(),
            "",
        )),
    }
    let fullest = gpus
        .iter()
        .filter_map(|g| {
            let r = g.reading.as_ref()?;
            Some((
                g.index,
                r.memory_used_mib? as f64,
                r.memory_total_mib? as f64,
            ))
        })
        .max_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)));
    checks.push(match fullest {
        Some((gpu, used, total)) if total > 0.0 && used / total >= MEMORY_FULL => Check::new(
            "gpu_memory",
            "GPU memory",
            "warn",
            json!(used / total * 100.0),
            format!("GPU {gpu}: {used:.0} of {total:.0} MiB in use ({:.0}%): one larger batch from out-of-memory", used / total * 100.0),
            "lower the batch size or use gradient accumulation, mixed precision (bf16) or activation checkpointing",
        ),
        Some((gpu, used, total)) if total > 0.0 => Check::new(
            "gpu_memory",
            "GPU memory",
            "ok",
            json!(used / total * 100.0),
            format!("GPU {gpu}: {used:.0} of {total:.0} MiB in use ({:.0}%)", used / total * 100.0),
            "",
        ),
        _ => Check::new(
            "gpu_memory",
            "GPU memory",
            "skip",
            Value::Null,
            "no memory reading for its GPUs".into(),
            "",
        ),
    });
    Ok(Report {
        version: 1,
        node: job.node.clone().unwrap_or(info.node),
        python: None,
        job: id,
        checks,
    })
}
