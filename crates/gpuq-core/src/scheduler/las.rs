//! Discretised two-dimensional least-attained-service (Tiresias's 2D-LAS):
//! a job's priority is the queue its attained service (GPUs × time run so far)
//! falls in; within a queue, first come first served. Needs no durations.
//!
//! Preemptive through the scheduler's own preemption: a caller running 2D-LAS
//! gives each job its queue as the priority class, so the first waiting job
//! that cannot start stops the fewest running jobs of a lower queue whose GPUs
//! let it start, on its node or nodes, and none when that would not make room
//! (preempting by GPU count, the cluster's shape aside, stopped jobs for
//! waiting ones that still found no room, over and over).
//!
//! As in the paper (Gu et al., NSDI'19), two guards against thrashing and
//! starvation: a job that (re)starts keeps its GPUs for a minimum service
//! quantum before it can be preempted again (the caller marks it not
//! preemptible), and a job that has waited longer than `PROMOTEKNOB` times
//! its last run is promoted back to the highest queue ([`promotion_due`]).

use crate::Millis;

/// Queue thresholds in GPU-seconds, as in the Tiresias authors' simulator
/// (SymbioticLab/Tiresias, `dlas-gpu`): two queues split at 3,250 GPU-seconds.
pub const TIRESIAS_THRESHOLDS: [f64; 1] = [3250.0];

/// The queue (0 = highest priority) of a job that has attained `gpu_seconds`.
pub fn queue_of(gpu_seconds: f64, thresholds: &[f64]) -> usize {
    thresholds.iter().take_while(|t| gpu_seconds >= **t).count()
}

/// PROMOTEKNOB: when a job preempted at `preempted_at` after a run of
/// `last_run_ms` is due back in the highest queue if it still waits then
/// (`knob` 0: never). Always after the preemption itself.
pub fn promotion_due(preempted_at: Millis, last_run_ms: Millis, knob: f64) -> Option<Millis> {
    if knob <= 0.0 {
        return None;
    }
    let due = preempted_at.saturating_add((knob * last_run_ms as f64).round() as Millis);
    Some(due.max(preempted_at + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_split_at_the_thresholds() {
        assert_eq!(queue_of(0.0, &TIRESIAS_THRESHOLDS), 0);
        assert_eq!(queue_of(3249.9, &TIRESIAS_THRESHOLDS), 0);
        assert_eq!(queue_of(3250.0, &TIRESIAS_THRESHOLDS), 1);
        assert_eq!(queue_of(5e6, &[10.0, 100.0]), 2);
    }

    #[test]
    fn a_starved_job_is_promoted_after_knob_times_its_last_run() {
        assert_eq!(promotion_due(1_000, 100_000, 8.0), Some(801_000));
        assert_eq!(
            promotion_due(1_000, 0, 8.0),
            Some(1_001),
            "never at the preemption itself"
        );
        assert_eq!(promotion_due(1_000, 100_000, 0.0), None, "knob 0: never");
    }
}
