//! Discretised two-dimensional least-attained-service (Tiresias's 2D-LAS):
//! a job's priority is the queue its attained service (GPUs × time run so far)
//! falls in; within a queue, first come first served. Needs no durations.
//! Preemptive: the simulator stops running jobs that fall outside [`keep`].

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
}

/// The jobs that should hold GPUs now: in priority order (queue, then arrival),
/// each that still fits in the remaining `capacity` GPUs. Jobs left out are to
/// wait, or to be preempted if they run.
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
    for j in order {
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
        }
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
