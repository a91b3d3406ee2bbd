//! `gpuq doctor ID`: a running job, from what the daemon measures: is its
//! process on the GPUs it holds (NVML's process list), is it input-bound
//! (its GPUs mostly idle), is its GPU memory near full.

use super::{Check, Report};
use crate::cli::CliError;
use gpuq_api::Client;
use gpuq_core::JobState;
use serde_json::{json, Value};

/// Utilisation under this, on average, reads as a GPU waiting.
const INPUT_BOUND_PERCENT: f64 = 50.0;
/// A job using this much CPU (percent of one core) or more keeps its CPUs busy
/// (half a core: on a shared node a saturated loop may get no more).
const CPU_BUSY_PERCENT: f64 = 50.0;
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
    // The job's CPU use over a second (its processes on this node).
    let cpu = client.job_cpu(id).await.ok();
    checks.push(input_bound(
        usage.and_then(|u| u.util_avg_percent),
        usage.and_then(|u| u.util_peak_percent),
        cpu.as_ref(),
    ));
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

/// Input-bound: its GPUs mostly idle while its CPUs are busy (making batches);
/// both idle is waiting on something else (storage, the network, a lock).
fn input_bound(avg: Option<f64>, peak: Option<f64>, cpu: Option<&gpuq_api::JobCpu>) -> Check {
    let title = "Is it input-bound";
    let cpu_text = |c: &gpuq_api::JobCpu| {
        format!(
            "its {} process(es) use {:.0}% CPU ({:.1} of {} cores)",
            c.processes,
            c.cpu_percent,
            c.cpu_percent / 100.0,
            c.cores
        )
    };
    match (avg, cpu) {
        (None, _) => Check::new("input_bound", title, "skip", Value::Null, "no utilisation reading for the job yet".into(), ""),
        (Some(a), _) if a >= INPUT_BOUND_PERCENT => Check::new(
            "input_bound",
            title,
            "ok",
            json!({"gpu_util_avg": a, "cpu_percent": cpu.map(|c| c.cpu_percent)}),
            format!("its GPUs averaged {a:.0}% busy{}", cpu.map(|c| format!("; {}", cpu_text(c))).unwrap_or_default()),
            "",
        ),
        (Some(a), Some(c)) if c.cpu_percent >= CPU_BUSY_PERCENT => Check::new(
            "input_bound",
            title,
            "warn",
            json!({"gpu_util_avg": a, "cpu_percent": c.cpu_percent}),
            format!(
                "input-bound: its GPUs averaged {a:.0}% busy (peak {:.0}%) while {}: the GPUs wait for batches",
                peak.unwrap_or(a),
                cpu_text(c)
            ),
            "raise DataLoader num_workers (about the CPU cores per GPU), set pin_memory=True and persistent_workers=True, \
             move decoding and augmentation to the GPU, or cache the data set; `gpuq tune` measures these",
        ),
        (Some(a), c) => Check::new(
            "input_bound",
            title,
            "warn",
            json!({"gpu_util_avg": a, "cpu_percent": c.map(|c| c.cpu_percent)}),
            format!(
                "its GPUs averaged {a:.0}% busy{}: it waits on something else",
                c.map(|c| format!(" and {}", cpu_text(c))).unwrap_or_default()
            ),
            "look for reads from slow storage or the network, a lock, or a sleep in the loop (`gpuq profile ID` shows where the time goes)",
        ),
    }
}
