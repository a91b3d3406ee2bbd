//! Discretised two-dimensional least-attained-service (Tiresias's 2D-LAS):
//! a job's priority is the queue its attained service (GPUs × time run so far)
//! falls in; within a queue, first come first served. Needs no durations.
//! Preemptive: the simulator stops running jobs that fall outside [`keep`].
//!
//! As in the paper (Gu et al., NSDI'19), two guards against thrashing and
//! starvation: a job that (re)starts keeps its GPUs for a minimum service
//! quantum before it can be preempted again ([`LasJob::protected`]), and a
//! job that has waited longer than `PROMOTEKNOB` times its last run is
//! promoted back to the highest queue ([`promoted`]).

use crate::{JobId, Millis};

/// Queue thresholds in GPU-seconds, as in the Tiresias authors' simulator
/// (SymbioticLab/Tiresias, `dlas-gpu`): two queues split at 3,250 GPU-seconds.
pub const TIRESIAS_THRESHOLDS: [f64; 1] = [3250.0];

/// The queue (0 = highest priority) of a job that has attained `gpu_seconds`.
pub fn queue_of(gpu_seconds: f64, thresholds: &[f64]) -> usize {
    thresholds.iter().take_while(|t| gpu_seconds >= **t).count()
}

/// A job competing for GPUs (running or waiting).
#[derive(Debug, Clone)]
pub struct LasJob {
    pub id: JobId,
    pub gpus: u32,
    pub attained_gpu_seconds: f64,
    pub submitted_at: Millis,
    /// Running and still within its service quantum since it (re)started:
    /// it keeps its GPUs whatever its queue.
    pub protected: bool,
}

/// PROMOTEKNOB: whether a job that has waited `waited_s` since it was
/// preempted after a run of `last_run_s` is due back in the highest queue
/// (`knob` 0: never).
pub fn promoted(waited_s: f64, last_run_s: f64, knob: f64) -> bool {
    knob > 0.0 && waited_s >= knob * last_run_s
}

/// The jobs that should hold GPUs now: the protected ones first, then in
/// priority order (queue, then arrival), each that still fits in the
/// remaining `capacity` GPUs. Jobs left out are to wait, or to be preempted
/// if they run.
pub fn keep(jobs: &[LasJob], capacity: u32, thresholds: &[f64]) -> Vec<JobId> {
    let mut order: Vec<&LasJob> = jobs.iter().collect();
    order.sort_by_key(|j| {
        (
            queue_of(j.attained_gpu_seconds, thresholds),
            j.submitted_at,
            j.id,
        )
    });
    let mut left = capacity;
    let mut out = Vec::new();
    for j in order.iter().filter(|j| j.protected) {
        left = left.saturating_sub(j.gpus);
        out.push(j.id);
    }
    for j in order.into_iter().filter(|j| !j.protected) {
        if j.gpus <= left {
            left -= j.gpus;
            out.push(j.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, gpus: u32, attained: f64, at: Millis) -> LasJob {
        LasJob {
            id,
            gpus,
            attained_gpu_seconds: attained,
            submitted_at: at,
            protected: false,
        }
    }

    #[test]
    fn a_protected_job_keeps_its_gpus_and_a_starved_one_is_promoted() {
        // The long runner is within its quantum: it keeps its 4 GPUs.
        let mut long = job(1, 4, 50_000.0, 0);
        long.protected = true;
        let jobs = [long, job(2, 2, 0.0, 10)];
        assert_eq!(keep(&jobs, 4, &TIRESIAS_THRESHOLDS), [1]);
        assert!(promoted(800.0, 100.0, 8.0));
        assert!(!promoted(799.0, 100.0, 8.0));
        assert!(!promoted(1e9, 100.0, 0.0), "knob 0: never");
    }

    #[test]
    fn fresh_jobs_come_before_long_runners() {
        assert_eq!(queue_of(0.0, &TIRESIAS_THRESHOLDS), 0);
        assert_eq!(queue_of(3250.0, &TIRESIAS_THRESHOLDS), 1);
        // A long runner (queue 1) yields its 4 GPUs to two newcomers (queue 0).
        let jobs = [
            job(1, 4, 50_000.0, 0),
            job(2, 2, 0.0, 10),
            job(3, 2, 100.0, 20),
        ];
        assert_eq!(keep(&jobs, 4, &TIRESIAS_THRESHOLDS), [2, 3]);
        // Within a queue, arrival order; a job that does not fit lets a smaller one by.
        let jobs = [job(1, 4, 0.0, 0), job(2, 2, 0.0, 10), job(3, 1, 0.0, 20)];
        assert_eq!(keep(&jobs, 3, &TIRESIAS_THRESHOLDS), [2, 3]);
    }
}
