//! The telemetry sampler: a thread that reads every GPU each interval, finds
//! which job each GPU process belongs to, and hands the round to the service.
//!
//! A plain thread, not a task: NVML calls block, and the NVML handle and its
//! event set stay on the thread that made them.

use super::service::monitoring::OnGpus;
use super::service::Service;
use gpuq_api::home::now_ms;
use gpuq_core::JobId;
use gpuq_gpu::{GpuInfo, GpuSource, SimLoad, Telemetry};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// File a job on simulated GPUs may write, under `$GPUQ_OUTPUT_DIR`, to change
/// its load while it runs: `{"util": 35, "memory_mib": 20000}` or just `35`.
pub const SIM_LOAD_FILE: &str = ".sim-load";

pub fn spawn(service: Arc<Service>, source: GpuSource, gpus: Vec<GpuInfo>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("gpuq-telemetry".into())
        .spawn(move || {
            let (mut telemetry, what) = Telemetry::open(&source, &gpus);
            if matches!(telemetry, Telemetry::None) {
                tracing::info!("telemetry off: {what}");
                return;
            }
            tracing::info!(
                "telemetry: {what}, every {}",
                gpuq_core::DurationSpec::from_millis(interval.as_millis() as u64)
            );
            let mut pgids = PgidCache::default();
            loop {
                let began = Instant::now();
                let jobs = service.jobs_on_gpus();
                let loads = sim_loads(&jobs);
                let now = now_ms();
                let mut sample = telemetry.sample(now, &loads);
                pgids.refresh(&jobs);
                for p in &mut sample.processes {
                    p.job = pgids.job_of(p.pid);
                }
                service.record_sample(now, sample, &jobs);
                std::thread::sleep(interval.saturating_sub(began.elapsed()));
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the telemetry thread: {e}; running without telemetry");
    }
}

/// What each simulated GPU should look like: its job's file, else its job's
/// environment, else busy (90%).
fn sim_loads(jobs: &[OnGpus]) -> Vec<(u32, SimLoad)> {
    let mut out = Vec::new();
    for job in jobs {
        let (env_util, env_mem) = job.sim_env;
        let mut load = SimLoad {
            util_percent: env_util.unwrap_or(90.0),
            memory_mib: env_mem,
        };
        if let Some(text) = read_sim_load(&job.job_dir) {
            if let Ok(n) = text.trim().parse::<f64>() {
                load.util_percent = n;
            } else if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                if let Some(u) = v.get("util").and_then(|u| u.as_f64()) {
                    load.util_percent = u;
                }
                if let Some(m) = v.get("memory_mib").and_then(|m| m.as_u64()) {
                    load.memory_mib = Some(m);
                }
            }
        }
        out.extend(job.gpus.iter().map(|g| (*g, load)));
    }
    out
}

/// The job's `.sim-load`, read as a root daemon may read a file in a user's
/// directory: through descriptors, no link followed, a regular file of the
/// directory's owner only, at most 4 KiB (a FIFO or `/dev/zero` planted there is
/// refused at once, not waited on or read forever).
fn read_sim_load(job_dir: &std::path::Path) -> Option<String> {
    use gpuq_exec::safe_fs::Dir;
    let outputs = Dir::open(job_dir).ok()?.dir("outputs").ok()?;
    let owner = outputs.owner().ok()?;
    let bytes = outputs
        .read_regular(SIM_LOAD_FILE, 4096, Some(owner))
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Maps a process to its job: the job's process group (its supervisor records
/// the pgid), found on the process or the nearest ancestor in it. Walking up
/// the tree catches workers that left the group (setsid, some launchers).
#[derive(Default)]
struct PgidCache {
    by_pgid: HashMap<i32, JobId>,
    /// Supervisor-recorded pid of each job's leader, for the ancestor walk.
    known: HashMap<(JobId, u32), i32>,
}

impl PgidCache {
    fn refresh(&mut self, jobs: &[OnGpus]) {
        self.known
            .retain(|(id, attempt), _| jobs.iter().any(|j| j.id == *id && j.attempt == *attempt));
        for job in jobs {
            if self.known.contains_key(&(job.id, job.attempt)) {
                continue;
            }
            let file = job.job_dir.join(format!("attempt-{}.pgid", job.attempt));
            if let Some(pgid) = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                self.known.insert((job.id, job.attempt), pgid);
            }
        }
        self.by_pgid = self
            .known
            .iter()
            .map(|((id, _), pgid)| (*pgid, *id))
            .collect();
    }

    fn job_of(&self, pid: u32) -> Option<JobId> {
        let mut pid = pid as i32;
        // Bounded: a process tree is never this deep, and a cycle (pid reuse) cannot loop us.
        for _ in 0..64 {
            let (ppid, pgrp) = proc_stat(pid)?;
            if let Some(job) = self.by_pgid.get(&pgrp).or_else(|| self.by_pgid.get(&pid)) {
                return Some(*job);
            }
            if ppid <= 1 {
                return None;
            }
            pid = ppid;
        }
        None
    }
}

/// `(ppid, pgrp)` of a process from `/proc/PID/stat`.
fn proc_stat(pid: i32) -> Option<(i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_in_another_group_is_found_through_its_parent() {
        // This test process stands for a job leader; a child in its own session
        // (setsid) stands for a worker that left the job's process group.
        let me = std::process::id() as i32;
        let (_, my_pgrp) = proc_stat(me).unwrap();
        let mut cache = PgidCache::default();
        cache.known.insert((7, 1), my_pgrp);
        cache.by_pgid.insert(my_pgrp, 7);
        let mut child = std::process::Command::new("setsid")
            .args(["sleep", "5"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let found = cache.job_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, Some(7));
        assert_eq!(cache.job_of(1), None, "init belongs to no job");
    }
}
