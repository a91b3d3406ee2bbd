//! How an ended attempt is classified, and what becomes of its job: success,
//! a retry after a back-off, a requeue, or a final failure, with the reason in words.

use super::stop::{Stop, StopCause, StopStep};
use gpuq_core::{Attempt, JobId, JobSpec, JobState, Millis};
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
    /// It ran out of memory: GPU memory (its log says so) or its memory
    /// limit (its cgroup counted an OOM kill).
    pub oom: bool,
}

/// How requeues by exit 75 are paced and bounded (`[scheduler]` in gpuq.toml):
/// a job that only ever exits 75 would otherwise start again in a hot loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequeuePolicy {
    pub delay_ms: u64,
    pub max_delay_ms: u64,
    /// Requeues in a row without progress allowed; the next such exit fails the job.
    pub max_without_progress: u32,
}

impl RequeuePolicy {
    pub fn of(config: &crate::config::SchedulerConfig) -> Self {
        Self {
            delay_ms: config.requeue_delay.as_millis(),
            max_delay_ms: config.requeue_max_delay.as_millis(),
            max_without_progress: config.max_requeues_without_progress,
        }
    }

    /// The delay after the `stalled`-th requeue in a row without progress
    /// (0: this one made progress): the base delay, doubled for each, capped.
    pub fn delay_ms(&self, stalled: u32) -> u64 {
        let factor = 1u64 << stalled.saturating_sub(1).min(20);
        self.delay_ms
            .saturating_mul(factor)
            .min(self.max_delay_ms.max(self.delay_ms))
    }
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
    /// The backend gave the attempt back (its node failed, its cores were
    /// taken): why. Requeued as an exit 75 is, worded as what happened.
    pub lost: Option<&'a str>,
    /// Requeues by exit 75 in a row since the job last made progress, this
    /// attempt's included (0: this attempt wrote a checkpoint or a metric).
    pub stalled_requeues: u32,
    pub requeue: RequeuePolicy,
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
    if let Some(why) = e
        .record
        .filter(|r| r.cannot_start)
        .and_then(|r| r.spawn_error.as_deref())
    {
        // The same command would fail the same way on every retry: say why at once.
        return Outcome {
            failures: e.failures + 1,
            ..keep(
                JobState::Failed,
                format!("cannot start: {why}. Not retried: fix the command, then `gpuq requeue`"),
                "failed",
            )
        };
    }
    if exit_code == Some(EXIT_REQUEUE) && signal.is_none() {
        return requeued_by_the_job(e);
    }
    if let Some(usage) = e
        .record
        .and_then(|r| r.usage.as_ref())
        .filter(|u| u.oom_killed)
    {
        return out_of_memory_limit(e, usage, &how);
    }
    if e.record
        .and_then(|r| r.usage.as_ref())
        .is_some_and(|u| u.node_oom_killed)
    {
        // Its own limit was never reached: the node (or all jobs together)
        // ran out, and the kernel picked a process of this job. Not its fault:
        // queued again like an attempt lost with its node, no retry spent.
        return keep(
            JobState::Queued,
            format!(
                "killed by the OOM killer: the node's jobs together ran out of memory (not this \
                 job's limit) ({how}); requeued, no retry counted"
            ),
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

/// The kernel killed a process of the job at its memory limit, as its cgroup
/// counted (whichever process it was: a job that exited non-zero after losing
/// a worker ran out of memory too). Not retried: the same run needs the same
/// memory, and a retry would only wait for the same kill.
fn out_of_memory_limit(e: &Ended<'_>, usage: &gpuq_exec::CgroupUsage, how: &str) -> Outcome {
    let limit = match usage.memory_limit_bytes {
        Some(limit) => format!(
            "the job's limit is {}",
            gpuq_core::advice::bytes_text(limit)
        ),
        None => "the job's memory limit was reached".to_string(),
    };
    let more = usage
        .memory_limit_bytes
        .map(|l| {
            let ask = gpuq_core::advice::memory_to_ask(l as f64 * 1.5);
            format!(" (e.g. --mem {})", gpuq_core::advice::mem_flag(ask))
        })
        .unwrap_or_default();
    Outcome {
        next_state: JobState::Failed,
        reason: format!(
            "out of memory: {limit} ({how}; the kernel's OOM killer stopped it at the limit). Not retried: \
             the same run would run out again. Ask for more with --mem{more}, or lower what it holds, then \
             `gpuq requeue`"
        ),
        failures: e.failures + 1,
        eligible_at: None,
        event: "failed",
        oom: true,
    }
}

/// What the attempt's cgroup counted, as stored with its end and shown by
/// `show`, `top`, the dashboard and `advise`; `None` when it ran unconfined.
pub fn host_usage(record: Option<&ExitRecord>) -> Option<gpuq_core::job::HostUsage> {
    record?.usage.as_ref().map(shown_usage)
}

/// What the API shows of a cgroup's counters (an ended attempt's or a running one's).
pub fn shown_usage(u: &gpuq_exec::CgroupUsage) -> gpuq_core::job::HostUsage {
    gpuq_core::job::HostUsage {
        oom_killed: u.oom_killed,
        memory_peak_bytes: u.memory_peak_bytes,
        memory_limit_bytes: u.memory_limit_bytes,
        cpu_seconds: u.cpu_seconds,
        cpus: u.cpus.filter(|c| *c > 0),
    }
}

/// Exit 75: queued again after a back-off that grows while the job makes no
/// progress, and failed once it has been requeued too often without any.
fn requeued_by_the_job(e: &Ended<'_>) -> Outcome {
    let stalled = e.stalled_requeues;
    let max = e.requeue.max_without_progress;
    if stalled > max {
        return Outcome {
            next_state: JobState::Failed,
            reason: format!(
                "requeued {} without progress: no new checkpoint or metric, and it exited 75 again; \
                 not requeued further (max_requeues_without_progress in gpuq.toml)",
                gpuq_core::plural(max.into(), "time")
            ),
            failures: e.failures + 1,
            eligible_at: None,
            event: "failed",
            oom: false,
        };
    }
    let delay = e.requeue.delay_ms(stalled);
    let stalled_note = match stalled {
        0 | 1 => String::new(),
        n => format!(", {n} in a row without a new checkpoint or metric"),
    };
    let after = gpuq_core::DurationSpec::from_millis(delay.max(1));
    let reason = match e.lost {
        Some(why) => format!(
            "requeued: {why} (not the job's fault, no retry counted{stalled_note}); starts again after {after}"
        ),
        None => format!("requeued by the job (exit 75{stalled_note}); starts again after {after}"),
    };
    Outcome {
        next_state: JobState::Queued,
        reason,
        failures: e.failures,
        eligible_at: (delay > 0).then_some(e.now + delay as i64),
        event: "requeued",
        oom: false,
    }
}

/// A container job whose image is not on the node: podman refuses with exit
/// 125 and "image not known" (jobs run with `--pull never`). Said in words, and
/// not retried: a retry would meet the same missing image. The reason is built
/// from the spec alone: everyone sees reasons, while the log that podman's
/// words are read from is its owner's and the admins'.
fn missing_image(e: &Ended<'_>) -> Option<String> {
    let image = e.spec.image.as_deref()?;
    if e.record?.exit_code != Some(125) || !e.log_tail.contains("image not known") {
        return None;
    }
    Some(format!(
        "image {image} is not on this node (podman exit 125: image not known). Not retried: pull it as \
         the job's user (`podman pull {image}`: jobs run with --pull never), then `gpuq requeue`"
    ))
}

/// Exits 75 in a row that end `attempts` (`ending`, still open in the store,
/// is one) and began after the job last made progress (`progress`, ms).
pub fn stalled_requeues(attempts: &[Attempt], ending: u32, progress: Option<Millis>) -> u32 {
    let after_progress = |a: &Attempt| progress.is_none_or(|p| a.started_at > p);
    let mut n = 0;
    for a in attempts.iter().rev() {
        let requeued =
            a.attempt == ending || (a.exit_code == Some(EXIT_REQUEUE) && a.signal.is_none());
        if !(requeued && after_progress(a)) {
            break;
        }
        n += 1;
    }
    n
}

impl super::Service {
    /// When the job last made progress: the newest entry of its checkpoint
    /// directory (not following links: the job's user owns it), or its latest
    /// metric. `None`: never.
    pub(super) fn last_progress_ms(&self, id: JobId) -> Option<Millis> {
        let checkpoint = gpuq_exec::safe_fs::Dir::open(self.job_dir(id).root())
            .and_then(|root| root.dir("checkpoints"))
            .and_then(|d| d.entries())
            .ok()
            .and_then(|entries| entries.iter().map(|e| e.modified_ms).max());
        let metric = self
            .with_tracking(|t| t.last_metric_time(id))
            .ok()
            .flatten();
        checkpoint.max(metric)
    }
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
            cannot_start: false,
            ended_at_ms: 0,
            usage: None,
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
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
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
    fn a_missing_image_reason_holds_the_image_name_and_none_of_the_log() {
        let record = exit(125);
        let spec = JobSpec {
            image: Some("localhost/train:1".into()),
            ..spec(2)
        };
        let log = "secret-token-123 Error: image not known: localhost/train:1 secret-token-123\n";
        let out = classify(&Ended {
            record: Some(&record),
            stop: None,
            spec: &spec,
            failures: 0,
            log_tail: log,
            now: 1000,
            began: true,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
        });
        assert_eq!(out.next_state, JobState::Failed);
        assert!(
            out.reason
                .starts_with("image localhost/train:1 is not on this node"),
            "{}",
            out.reason
        );
        assert!(!out.reason.contains("secret"), "{}", out.reason);
    }

    const POLICY: RequeuePolicy = RequeuePolicy {
        delay_ms: 1000,
        max_delay_ms: 5000,
        max_without_progress: 3,
    };

    fn requeue(stalled: u32) -> Outcome {
        let record = exit(75);
        let spec = spec(0);
        classify(&Ended {
            record: Some(&record),
            stop: None,
            spec: &spec,
            failures: 0,
            log_tail: "",
            now: 1000,
            began: true,
            lost: None,
            stalled_requeues: stalled,
            requeue: POLICY,
        })
    }

    #[test]
    fn exit_75_requeues_without_counting_a_failure_after_a_back_off() {
        let o = classify_exit(75, 0, 0, "");
        assert_eq!(
            (o.next_state, o.failures, o.eligible_at),
            (JobState::Queued, 0, Some(2000))
        );
        // Without progress the delay doubles (capped), then the job fails with the reason.
        let delays: Vec<_> = (1..=3).map(|n| requeue(n).eligible_at).collect();
        assert_eq!(delays, [Some(2000), Some(3000), Some(5000)]);
        assert_eq!(requeue(3).event, "requeued");
        let out = requeue(4);
        assert_eq!((out.next_state, out.event), (JobState::Failed, "failed"));
        assert!(
            out.reason
                .starts_with("requeued 3 times without progress: no new checkpoint or metric"),
            "{}",
            out.reason
        );
        assert_eq!(POLICY.delay_ms(40), 5000);
    }

    #[test]
    fn requeues_in_a_row_are_counted_since_the_last_progress() {
        let attempt = |n: u32, started_at: i64, exit_code: Option<i32>| Attempt {
            job_id: 1,
            attempt: n,
            node: "n".into(),
            gpus: vec![],
            started_at,
            ended_at: None,
            exit_code,
            signal: None,
            reason: None,
            gpu_usage: None,
            rate_per_hour: None,
            slurm_job_id: None,
            host_usage: None,
        };
        // Attempt 3 is ending (still open in the store); 1 failed, 2 exited 75.
        let mut attempts = vec![
            attempt(1, 100, Some(1)),
            attempt(2, 200, Some(75)),
            attempt(3, 300, None),
        ];
        assert_eq!(stalled_requeues(&attempts, 3, None), 2);
        assert_eq!(stalled_requeues(&attempts, 3, Some(250)), 1);
        assert_eq!(
            stalled_requeues(&attempts, 3, Some(300)),
            0,
            "a checkpoint now"
        );
        attempts[0].exit_code = Some(75);
        assert_eq!(stalled_requeues(&attempts, 3, Some(50)), 3);
    }

    #[test]
    fn a_command_that_cannot_start_fails_at_once_with_the_cause() {
        let record = ExitRecord::cannot_start("`pythonx`: command not found".into(), 0);
        let s = spec(5);
        let o = classify(&Ended {
            record: Some(&record),
            stop: None,
            spec: &s,
            failures: 0,
            log_tail: "",
            now: 0,
            began: true,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
        });
        assert_eq!((o.next_state, o.eligible_at), (JobState::Failed, None));
        assert!(
            o.reason
                .starts_with("cannot start: `pythonx`: command not found"),
            "{}",
            o.reason
        );
        // A launch that failed for the moment (no memory, no processes) is still retried.
        let transient = ExitRecord::spawn_failed("fork: EAGAIN".into(), 0);
        let o = classify(&Ended {
            record: Some(&transient),
            stop: None,
            spec: &s,
            failures: 0,
            log_tail: "",
            now: 0,
            began: true,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
        });
        assert_eq!(o.next_state, JobState::Queued);
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

    fn ended_with_usage(record: &ExitRecord, retries: u32, log: &str) -> Outcome {
        let s = spec(retries);
        classify(&Ended {
            record: Some(record),
            stop: None,
            spec: &s,
            failures: 0,
            log_tail: log,
            now: 1000,
            began: true,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
        })
    }

    fn oom_killed(code: Option<i32>, signal: Option<i32>) -> ExitRecord {
        ExitRecord {
            exit_code: code,
            signal,
            usage: Some(gpuq_exec::CgroupUsage {
                oom_killed: true,
                node_oom_killed: false,
                memory_peak_bytes: Some(64 << 30),
                memory_limit_bytes: Some(64 << 30),
                cpu_seconds: Some(10.0),
                cpus: None,
            }),
            ..exit(0)
        }
    }

    #[test]
    fn a_kill_at_the_memory_limit_fails_at_once_naming_the_limit() {
        let o = ended_with_usage(&oom_killed(None, Some(9)), 3, "");
        assert_eq!(
            (o.next_state, o.failures, o.eligible_at, o.oom),
            (JobState::Failed, 1, None, true)
        );
        assert!(
            o.reason.starts_with(
                "out of memory: the job's limit is 64 GiB (killed by signal 9 (SIGKILL)"
            ),
            "{}",
            o.reason
        );
        assert!(
            o.reason
                .contains("Ask for more with --mem (e.g. --mem 96G)"),
            "{}",
            o.reason
        );
        // Only a worker was killed and the job gave up on its own: the counter decides.
        let o = ended_with_usage(&oom_killed(Some(1), None), 3, "");
        assert!(
            o.reason
                .starts_with("out of memory: the job's limit is 64 GiB (exit 1;"),
            "{}",
            o.reason
        );
        assert_eq!(o.next_state, JobState::Failed);
        // A limit the record does not give is not made up.
        let mut no_limit = oom_killed(None, Some(9));
        no_limit.usage.as_mut().unwrap().memory_limit_bytes = None;
        let o = ended_with_usage(&no_limit, 3, "");
        assert!(
            o.reason
                .starts_with("out of memory: the job's memory limit was reached"),
            "{}",
            o.reason
        );
    }

    #[test]
    fn a_kill_because_the_node_ran_out_is_requeued_not_blamed() {
        let mut record = oom_killed(None, Some(9));
        let u = record.usage.as_mut().unwrap();
        (u.oom_killed, u.node_oom_killed) = (false, true);
        u.memory_peak_bytes = Some(1 << 30);
        // No retries left: still queued again, and no failure counted.
        let o = ended_with_usage(&record, 0, "");
        assert_eq!(
            (o.next_state, o.failures, o.event, o.oom),
            (JobState::Queued, 0, "requeued", false)
        );
        assert!(
            o.reason.starts_with(
                "killed by the OOM killer: the node's jobs together ran out of memory (not this job's limit)"
            ),
            "{}",
            o.reason
        );
        assert!(!o.reason.contains("--mem"), "{}", o.reason);
        // One that exited 0 all the same succeeded.
        let mut ok = record.clone();
        (ok.exit_code, ok.signal) = (Some(0), None);
        assert_eq!(ended_with_usage(&ok, 0, "").next_state, JobState::Succeeded);
    }

    #[test]
    fn exit_0_and_exit_75_stay_what_they_were_despite_an_oom_kill() {
        let o = ended_with_usage(&oom_killed(Some(0), None), 3, "");
        assert_eq!(o.next_state, JobState::Succeeded);
        let o = ended_with_usage(&oom_killed(Some(75), None), 3, "");
        assert_eq!((o.next_state, o.event), (JobState::Queued, "requeued"));
        // No kill counted: an ordinary failure, retried; the figures change nothing.
        let mut counted = oom_killed(Some(1), None);
        counted.usage.as_mut().unwrap().oom_killed = false;
        let o = ended_with_usage(&counted, 3, "");
        assert_eq!((o.next_state, o.oom), (JobState::Queued, false));
    }

    #[test]
    fn a_cancel_or_preemption_keeps_its_cause_over_an_oom_kill() {
        let record = oom_killed(None, Some(9));
        let s = spec(3);
        let stop = Stop {
            cause: StopCause::Preempt { for_job: 4 },
            step: StopStep::Kill,
        };
        let o = classify(&Ended {
            record: Some(&record),
            stop: Some(&stop),
            spec: &s,
            failures: 0,
            log_tail: "",
            now: 0,
            began: true,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
        });
        assert_eq!(o.next_state, JobState::Preempted);
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
            cannot_start: false,
            ended_at_ms: 0,
            usage: None,
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
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
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
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
            now: 0,
        });
        let waiting = classify(&Ended {
            record: None,
            stop: Some(&stop),
            spec: &s,
            failures: 0,
            log_tail: "",
            began: false,
            lost: None,
            stalled_requeues: 0,
            requeue: POLICY,
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

    #[test]
    fn an_attempt_the_backend_gave_back_says_why_not_exit_75() {
        let s = spec(2);
        let record = ExitRecord {
            exit_code: Some(EXIT_REQUEUE),
            signal: None,
            spawn_error: None,
            cannot_start: false,
            ended_at_ms: 0,
            usage: None,
        };
        let o = classify(&Ended {
            record: Some(&record),
            stop: None,
            spec: &s,
            failures: 0,
            log_tail: "",
            began: true,
            lost: Some("Slurm job 12: NODE_FAIL"),
            stalled_requeues: 1,
            requeue: POLICY,
            now: 0,
        });
        assert_eq!(o.next_state, JobState::Queued);
        assert_eq!(o.failures, 0, "no retry spent");
        assert!(
            o.reason
                .starts_with("requeued: Slurm job 12: NODE_FAIL (not the job's fault"),
            "{}",
            o.reason
        );
        assert!(!o.reason.contains("exit 75"), "{}", o.reason);
    }
}
