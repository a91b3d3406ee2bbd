//! A running job's CPU use, for `gpuq doctor ID` (input-bound: GPUs idle
//! while the job's CPUs are busy). From `/proc` (the kernel's, not a path a
//! user controls): the CPU time of every process in the job's process group
//! or session, sampled twice.

use super::Service;
use gpuq_api::JobCpu;
use gpuq_core::JobId;
use std::time::Duration;

/// Between the two samples.
const WINDOW: Duration = Duration::from_millis(1000);

/// (processes, CPU ticks) of the processes whose group or session is `pgid`.
fn sample(pgid: i32) -> (u32, u64) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    let (mut n, mut ticks) = (0, 0);
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name (in parentheses, which may hold anything):
        // state ppid pgrp session … utime(14) stime(15), counted from the pid.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        let (Some(pgrp), Some(session)) = (num(2), num(3)) else {
            continue;
        };
        if pgrp != pgid as i64 && session != pgid as i64 {
            continue;
        }
        n += 1;
        ticks += (num(11).unwrap_or(0) + num(12).unwrap_or(0)).max(0) as u64;
    }
    (n, ticks)
}

impl Service {
    /// The job's CPU use now, in percent of one core; `None` when it is not
    /// running on this node (no process group recorded here).
    pub async fn job_cpu(&self, id: JobId) -> Result<Option<JobCpu>, super::ServiceError> {
        let Some(attempt) = self.lock().running.get(&id).map(|r| r.attempt) else {
            return Ok(None);
        };
        let path = gpuq_exec::JobDir::new(&self.home, id).pgid_file(attempt);
        let Some(pgid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|p| *p > 1)
        else {
            return Ok(None);
        };
        let (_, before) = tokio::task::spawn_blocking(move || sample(pgid))
            .await
            .unwrap_or((0, 0));
        tokio::time::sleep(WINDOW).await;
        let (processes, after) = tokio::task::spawn_blocking(move || sample(pgid))
            .await
            .unwrap_or((0, 0));
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        Ok(Some(JobCpu {
            job: id,
            cpu_percent: after.saturating_sub(before) as f64 / hz / WINDOW.as_secs_f64() * 100.0,
            processes,
            cores,
        }))
    }
}
