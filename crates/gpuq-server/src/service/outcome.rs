//! How an ended attempt is classified, and what becomes of its job: success,
//! a retry after a back-off, a requeue, or a final failure, with the reason in words.

use super::stop::{Stop, StopCause, StopStep};
use gpuq_core::{JobSpec, JobState, Millis};
use gpuq_exec::ExitRecord;

/// Exit status a job uses to ask to be queued again (EX_TEMPFAIL); not a failure.
pub const EXIT_REQUEUE: i32 = 75;
/// Default delay before the first retry.
pub const DEFAULT_RETRY_DELAY_MS: u64 = 10_000;
/// Longest back-off between retries.
pub const MAX_RETRY_DELAY_MS: u64 = 600_000;

/// Log lines that mean the GPU ran out of memory (PyTorch, CUDA, cuBLAS/cuDNN).
const OOM_MARKERS: &[&str] = &[
    "CUDA out of memory",
    // PyTorch's CPU allocator (a job under a memory limit).
    "DefaultCPUAllocator: can't allocate memory",
    "torch.cuda.OutOfMemoryError",
    "torch.OutOfMemoryError",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "cudaErrorMemoryAllocation",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub next_state: JobState,
    pub reason: String,
    pub failures: u32,
    pub eligible_at: Option<Millis>,
    /// Event kind for the history.
    pub event: &'static str,
    /// The log shows the job ran out of GPU memory.
    pub oom: bool,
}

/// Everything the classification looks at.
pub struct Ended<'a> {
    pub record: Option<&'a ExitRecord>,
    pub stop: Option<&'a Stop>,
    pub spec: &'a JobSpec,
    /// Failed attempts before this one.
    pub failures: u32,
    pub log_tail: &'a str,
    pub now: Millis,
    /// It had begun to run (false: it ended while waiting in the backend's queue).
    pub began: bool,
}

pub fn classify(e: &Ended<'_>) -> Outcome {
    let how = match e.record {
        Some(r) => r.describe(),
        None => "the supervisor died without recording an exit status".to_string(),
    };
    let exit_code = e.record.and_then(|r| r.exit_code);
    let signal = e.record.and_then(|r| r.signal);
    let keep = |next_state, reason: String, event| Outcome {
        next_state,
        reason,
        failures: e.failures,
        eligible_at: None,
        event,
        oom: false,
    };
    if let Some(stop) = e.stop {
        let ended = if e.began || e.record.is_some() {
            describe_stop_end(stop, &how)
        } else {
            "before it began to run (it was still waiting in the backend's queue)".to_string()
        };
        return match &stop.cause {
            StopCause::Cancel { by } => keep(
                JobState::Cancelled,
                format!("cancelled by {by}; {ended}"),
                "cancelled",
            ),
            StopCause::TimeLimit { limit } => keep(
                JobState::Failed,
                format!("time limit {limit} reached; {ended}"),
                "failed",
            ),
            StopCause::Preempt { for_job } => keep(
                JobState::Preempted,
                format!("preempted for job {for_job}; {ended}"),
                "preempted",
            ),
            StopCause::Requeue { by } => keep(
                JobState::Queued,
                format!("requeued by {by}; {ended}"),
                "requeued",
            ),
            StopCause::Idle { why } => keep(
                JobState::Cancelled,
                format!("stopped idle: {why}; {ended}"),
                "cancelled",
            ),
        };
    }
    if exit_code == Some(0) && signal.is_none() {
        return keep(JobState::Succeeded, how, "succeeded");
    }
    if exit_code == Some(EXIT_REQUEUE) {
        return keep(
            JobState::Queued,
            "requeued by the job (exit 75)".into(),
            "requeued",
        );
    }
    if let Some(marker) = OOM_MARKERS.iter().find(|m| e.log_tail.contains(*m)) {
        return Outcome {
            next_state: JobState::Failed,
            reason: format!(
                "{} out of memory ({how}; the log says \"{marker}\"). Not retried: the same run would run out \
                 again. Lower the batch size, use AMP or gradient checkpointing, or ask for more GPUs, then \
                 `gpuq requeue`",
                if marker.starts_with("DefaultCPUAllocator") { "CPU" } else { "CUDA" }
            ),
            failures: e.failures + 1,
            eligible_at: None,
            event: "failed",
            oom: true,
        };
    }
    if let Some(reason) = missing_image(e) {
        return Outcome {
            next_state: JobState::Failed,
            reason,
            failures: e.failures + 1,
            eligible_at: None,
            event: "failed",
            oom: false,
        };
    }
    let failures = e.failures + 1;
    if failures <= e.spec.retries {
        let delay = retry_delay_ms(e.spec, failures);
        Outcome {
            next_state: JobState::Queued,
            reason: format!(
                "{how}; retry {failures} of {} in {}",
                e.spec.retries,
                gpuq_core::DurationSpec::from_millis(delay.max(1))
            ),
            failures,
            eligible_at: Some(e.now + delay as i64),
            event: "retry",
            oom: false,
        }
    } else {
        let tail = if e.spec.retries > 0 {
            format!(" (after {} retries)", e.spec.retries)
        } else {
            String::new()
        };
        Outcome {
            next_state: JobState::Failed,
            reason: format!("{how}{tail}"),
            failures,
            eligible_at: None,
            event: "failed",
            oom: false,
        }
    }
}

/// A container job whose image is not on the node: podman refuses with exit
/// 125 and "image not known" (jobs run with `--pull never`). Said in words, and
/// not retried: a retry would meet the same missing image.
fn missing_image(e: &Ended<'_>) -> Option<String> {
    let image = e.spec.image.as_deref()?;
    if e.record?.exit_code != Some(125) {
        return None;
    }
    let said = e
        .log_tail
        .lines()
        .rev()
        .find(|l| l.contains("image not known"))?
        .trim();
    Some(format!(
        "image {image} is not on this node (podman exit 125: {said}). Not retried: pull it as the job's \
         user (`podman pull {image}`; jobs run with --pull never), then `gpuq requeue`"
    ))
}

/// Exponential back-off: the spec's delay, doubled for each further failure, capped.
pub fn retry_delay_ms(spec: &JobSpec, failures: u32) -> u64 {
    let base = spec
        .retry_delay
        .map(|d| d.as_millis())
        .unwrap_or(DEFAULT_RETRY_DELAY_MS);
    let factor = 1u64 << failures.saturating_sub(1).min(20);
    base.saturating_mul(factor)
        .min(MAX_RETRY_DELAY_MS.max(base))
}

/// Which step of the stop protocol ended the attempt.
fn describe_stop_end(stop: &Stop, how: &str) -> String {
    match stop.step {
        StopStep::Requested => format!("ended before any signal ({how})"),
        StopStep::EarlySignal(name) => format!("ended after the early signal SIG{name} ({how})"),
        StopStep::Term => format!("ended after SIGTERM, within the grace period ({how})"),
        StopStep::Kill => format!("killed with SIGKILL after the grace period ({how})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_core::DurationSpec;

    fn exit(code: i32) -> ExitRecord {
        ExitRecord {
            exit_code: Some(code),
            signal: None,
            spawn_error: None,
            ended_at_ms: 0,
        }
    }

    fn spec(retries: u32) -> JobSpec {
        JobSpec {
            command: Some(vec!["x".into()]),
            retries,
            retry_delay: Some(DurationSpec::from_secs(10)),
            ..Default::default()
        }
    }

    fn classify_exit(code: i32, retries: u32, failures: u32, log: &str) -> Outcome {
        let record = exit(code);
        let spec = spec(retries);
        classify(&Ended {
            record: Some(&record),
            stop: None,
            spec: &spec,
            failures,
            log_tail: log,
            now: 1000,
            began: true,
        })
    }

    #[test]
    fn success_failure_and_retry_with_back_off() {
        assert_eq!(classify_exit(0, 0, 0, "").next_state, JobState::Succeeded);
        let first = classify_exit(1, 3, 0, "");
        assert_eq!(
            (first.next_state, first.failures, first.eligible_at),
            (JobState::Queued, 1, Some(11_000))
        );
        assert_eq!(first.reason, "exit 1; retry 1 of 3 in 10s");
        let third = classify_exit(1, 3, 2, "");
        assert_eq!(third.eligible_at, Some(1000 + 40_000), "10s, 20s, 40s");
        let out = classify_exit(2, 3, 3, "");
        assert_eq!(
            (out.next_state, out.reason.as_str()),
            (JobState::Failed, "exit 2 (after 3 retries)")
        );
    }

    #[test]
    fn exit_75_requeues_without_counting() {
        let o = classify_exit(75, 0, 0, "");
        assert_eq!(
            (o.next_state, o.failures, o.eligible_at),
            (JobState::Queued, 0, None)
        );
    }

    #[test]
    fn cuda_oom_is_named_and_not_retried() {
        let log = "step 10\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        let o = classify_exit(1, 5, 0, log);
        assert_eq!(o.next_state, JobState::Failed);
        assert!(
            o.reason.starts_with("CUDA out of memory") && o.reason.contains("Not retried"),
            "{}",
            o.reason
        );
    }

    #[test]
    fn back_off_is_capped() {
        assert_eq!(retry_delay_ms(&spec(50), 40), MAX_RETRY_DELAY_MS);
    }

    #[test]
    fn a_stop_says_who_and_which_step_ended_it() {
        let record = ExitRecord {
            exit_code: None,
            signal: Some(9),
            spawn_error: None,
            ended_at_ms: 0,
        };
        let stop = Stop {
            cause: StopCause::Cancel { by: "alice".into() },
            step: StopStep::Kill,
        };
        let s = spec(3);
        let o = classify(&Ended {
            record: Some(&record),
            stop: Some(&stop),
            spec: &s,
            failures: 0,
            log_tail: "",
            began: true,
            now: 0,
        });
        assert_eq!(o.next_state, JobState::Cancelled);
        assert_eq!(o.reason, "cancelled by alice; killed with SIGKILL after the grace period (killed by signal 9 (SIGKILL))");
        let pre = Stop {
            cause: StopCause::Preempt { for_job: 7 },
            step: StopStep::Term,
        };
        let o = classify(&Ended {
            record: Some(&exit(0)),
            stop: Some(&pre),
            spec: &s,
            failures: 1,
            log_tail: "",
            began: true,
            now: 0,
        });
        let waiting = classify(&Ended {
            record: None,
            stop: Some(&stop),
            spec: &s,
            failures: 0,
            log_tail: "",
            began: false,
            now: 0,
        });
        assert_eq!(
            waiting.reason,
            "cancelled by alice; before it began to run (it was still waiting in the backend's queue)"
        );
        assert_eq!(
            (o.next_state, o.failures, o.event),
            (JobState::Preempted, 1, "preempted")
        );
    }
}
