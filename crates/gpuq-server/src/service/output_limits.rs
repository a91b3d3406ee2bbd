//! Limits on what jobs write (`[output]` in gpuq.toml): a token bucket per run
//! and per user on metric points, the per-run caps the store checks, and the
//! disk reserve: when the data directory's disk is down to it, metrics are
//! dropped (and the supervisors stop writing logs) so the database keeps room
//! to commit. Dropped points never touch the database one by one: they are
//! counted here and recorded with the run's next write, or by the tick.

use super::Service;
use gpuq_core::alerts::{AlertKind, NewAlert};
use gpuq_store::tracking::{DropReason, Dropped, Drops, MetricCaps};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the data directory's free space is looked at (a statvfs).
const DISK_CHECK: Duration = Duration::from_secs(1);
/// A full bucket untouched this long is forgotten (it would be full again anyway).
const IDLE_FORGET: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
        }
    }

    fn refill(&mut self, rate: u32, burst: u32, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * f64::from(rate)).min(f64::from(burst));
        self.at = now;
    }
}

/// Rates in points per second, bursts in points.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub run: u32,
    pub run_burst: u32,
    pub user: u32,
    pub user_burst: u32,
}

/// The buckets, and the drops not yet recorded in the store.
pub struct MetricsGate {
    rates: Rates,
    runs: HashMap<String, Bucket>,
    users: HashMap<String, Bucket>,
    pending: HashMap<String, Drops>,
}

impl MetricsGate {
    pub fn new(rates: Rates) -> Self {
        Self {
            rates,
            runs: HashMap::new(),
            users: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// How many of `n` points may be stored now for `run` of `user`; the rest
    /// are counted as dropped by the rate limit.
    pub fn admit(&mut self, run: &str, user: &str, n: usize, now: Instant) -> usize {
        let r = self.rates;
        let rb = self
            .runs
            .entry(run.to_string())
            .or_insert_with(|| Bucket::full(r.run_burst, now));
        rb.refill(r.run, r.run_burst, now);
        let ub = self
            .users
            .entry(user.to_string())
            .or_insert_with(|| Bucket::full(r.user_burst, now));
        ub.refill(r.user, r.user_burst, now);
        let allowed = (n as f64).min(rb.tokens).min(ub.tokens).max(0.0).floor();
        rb.tokens -= allowed;
        ub.tokens -= allowed;
        let allowed = allowed as usize;
        if allowed < n {
            self.count(run, DropReason::Rate, (n - allowed) as u64);
        }
        allowed
    }

    /// How many points `run` of `user` could be admitted now.
    fn room(&mut self, run: &str, user: &str, now: Instant) -> usize {
        let r = self.rates;
        let rb = self
            .runs
            .entry(run.to_string())
            .or_insert_with(|| Bucket::full(r.run_burst, now));
        rb.refill(r.run, r.run_burst, now);
        let run_tokens = rb.tokens;
        let ub = self
            .users
            .entry(user.to_string())
            .or_insert_with(|| Bucket::full(r.user_burst, now));
        ub.refill(r.user, r.user_burst, now);
        run_tokens.min(ub.tokens).max(0.0) as usize
    }

    /// Counts points dropped before any write.
    pub fn count(&mut self, run: &str, reason: DropReason, n: u64) {
        if n > 0 {
            *self
                .pending
                .entry(run.to_string())
                .or_default()
                .entry(reason)
                .or_default() += n;
        }
    }

    /// The drops counted for `run` so far, to record with its write.
    pub fn take(&mut self, run: &str) -> Drops {
        self.pending.remove(run).unwrap_or_default()
    }

    /// Puts back drops whose write failed.
    pub fn put_back(&mut self, run: &str, drops: Drops) {
        for (reason, n) in drops {
            self.count(run, reason, n);
        }
    }

    fn take_all(&mut self) -> Vec<(String, Drops)> {
        self.pending.drain().collect()
    }

    /// Forgets buckets untouched for long enough to be full again: a new one
    /// would be the same.
    fn forget_idle(&mut self, now: Instant) {
        let r = self.rates;
        let keep = |rate: u32, burst: u32| {
            IDLE_FORGET.max(Duration::from_secs_f64(
                f64::from(burst) / f64::from(rate.max(1)),
            ))
        };
        let (run_keep, user_keep) = (keep(r.run, r.run_burst), keep(r.user, r.user_burst));
        self.runs
            .retain(|_, b| now.saturating_duration_since(b.at) < run_keep);
        self.users
            .retain(|_, b| now.saturating_duration_since(b.at) < user_keep);
    }
}

/// Each user's bucket of submits (`[scheduler] submit_rate`, `submit_burst`).
#[derive(Default)]
pub struct SubmitGate {
    users: HashMap<String, Bucket>,
}

impl SubmitGate {
    /// Takes `n` jobs from `user`'s bucket, or none and false when it holds
    /// fewer. More than a whole burst at once is let through from a full
    /// bucket (an array as large as the burst).
    pub fn admit(&mut self, user: &str, n: u32, rate: u32, burst: u32, now: Instant) -> bool {
        if self.users.len() > 4096 {
            // Full buckets are as good as none: forget them.
            self.users.retain(|_, b| {
                b.refill(rate, burst, now);
                b.tokens < f64::from(burst)
            });
        }
        let b = self
            .users
            .entry(user.to_string())
            .or_insert_with(|| Bucket::full(burst, now));
        b.refill(rate, burst, now);
        let cost = f64::from(n.min(burst));
        if b.tokens < cost {
            return false;
        }
        b.tokens -= cost;
        true
    }
}

/// Whether the data directory's disk is down to its reserve, looked at once a second.
#[derive(Default)]
pub struct DiskWatch {
    checked: Option<Instant>,
    low: bool,
}

/// Free and total bytes of the filesystem holding `path` (for an unprivileged
/// writer: blocks root's reserve holds back do not count as free).
pub fn disk_space(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

impl Service {
    /// The store's caps per run.
    pub fn metric_caps(&self) -> MetricCaps {
        MetricCaps {
            max_points: self.config.output.metrics_max_points,
            max_keys: self.config.output.metrics_max_keys,
        }
    }

    /// True while the data directory's disk has less free space than its reserve.
    pub fn disk_low(&self) -> bool {
        let mut w = self.disk_watch.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if w.checked
            .is_none_or(|at| now.duration_since(at) >= DISK_CHECK)
        {
            w.checked = Some(now);
            w.low = disk_space(&self.home)
                .is_some_and(|(free, total)| free < self.config.output.reserve_bytes(total));
        }
        w.low
    }

    /// Refuses a submit of `n` jobs by `user` beyond their submit rate.
    pub(super) fn check_submit_rate(&self, user: &str, n: u32) -> Result<(), super::ServiceError> {
        let c = &self.config.scheduler;
        let admitted = self
            .submit_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(user, n, c.submit_rate, c.submit_burst, Instant::now());
        if admitted {
            return Ok(());
        }
        Err(super::ServiceError::Quota(format!(
            "{user} submits faster than {} jobs a second (bursts of {}), the most [scheduler] submit_rate \
             and submit_burst in gpuq.toml allow (cancelled jobs count: their rows stay); wait a moment and \
             submit again",
            c.submit_rate, c.submit_burst
        )))
    }

    /// `[output]` of gpuq.toml.
    pub fn output_config(&self) -> &crate::config::OutputConfig {
        &self.config.output
    }

    /// True if writing `more` bytes now would take the data directory's disk
    /// below its reserve (looked at now, not cached: for a long upload).
    pub fn would_breach_reserve(&self, more: u64) -> bool {
        disk_space(&self.home).is_some_and(|(free, total)| {
            free < self.config.output.reserve_bytes(total).saturating_add(more)
        })
    }

    /// Which of `n` points of `run` (of `user`) may be written now: `(admitted,
    /// drops to record with the write)`. Over the rate or on a disk at its
    /// reserve the excess is counted, not stored.
    pub fn admit_metrics(&self, run: &str, user: &str, n: usize) -> (usize, Drops) {
        let mut gate = self.metrics_gate.lock().unwrap_or_else(|p| p.into_inner());
        let admitted = if n == 0 {
            0
        } else if self.disk_low() {
            gate.count(run, DropReason::Disk, n as u64);
            0
        } else {
            gate.admit(run, user, n, Instant::now())
        };
        // What was dropped before is recorded with a write that happens anyway;
        // a run whose every point is dropped waits for the tick.
        let earlier = if admitted > 0 {
            gate.take(run)
        } else {
            Drops::new()
        };
        (admitted, earlier)
    }

    /// How many points `run` of `user` may write now, and the reason the rest
    /// are dropped (for a reader that skips what it would drop unparsed).
    pub fn metric_room(&self, run: &str, user: &str) -> (usize, DropReason) {
        if self.disk_low() {
            return (0, DropReason::Disk);
        }
        let mut gate = self.metrics_gate.lock().unwrap_or_else(|p| p.into_inner());
        (gate.room(run, user, Instant::now()), DropReason::Rate)
    }

    /// Counts points dropped unread.
    pub fn count_dropped(&self, run: &str, reason: DropReason, n: u64) {
        self.metrics_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .count(run, reason, n);
    }

    /// Puts back drops that a failed write did not record.
    pub fn unrecorded_drops(&self, run: &str, drops: Drops) {
        self.metrics_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put_back(run, drops);
    }

    /// The tick's part: records counted drops (one small transaction per run
    /// that dropped any) and forgets idle buckets.
    pub(super) fn flush_metric_drops(&self) {
        let pending = {
            let mut gate = self.metrics_gate.lock().unwrap_or_else(|p| p.into_inner());
            gate.forget_idle(Instant::now());
            gate.take_all()
        };
        let now = gpuq_api::home::now_ms();
        for (run, drops) in pending {
            match self.with_tracking_mut(|t| t.record_dropped(&run, &drops, now)) {
                Ok(d) => self.say_dropped(&run, &d),
                Err(e) => {
                    tracing::debug!("run {run}: dropped metrics not recorded: {e}");
                    self.unrecorded_drops(&run, drops);
                }
            }
        }
    }

    /// Alerts once per run and reason, when a write recorded its first drop.
    pub fn say_dropped(&self, run: &str, d: &Dropped) {
        if d.first.is_empty() {
            return;
        }
        let o = &self.config.output;
        let user = self.with_tracking(|t| t.run_user(run)).ok().flatten();
        let what = match d.job {
            Some(job) => format!("job {job}"),
            None => format!("run {run}"),
        };
        let alerts = d
            .first
            .iter()
            .map(|reason| {
                let limit = match reason {
                    DropReason::Rate => format!(
                        "{} points/s per job, {} per user (bursts of {})",
                        o.metrics_rate, o.metrics_user_rate, o.metrics_burst
                    ),
                    DropReason::Points => format!("{} points per job", o.metrics_max_points),
                    DropReason::Keys => format!(
                        "{} names per job, of metrics, of params and of tags",
                        o.metrics_max_keys
                    ),
                    DropReason::Disk => "free space kept for the database".into(),
                };
                let more = match d.job {
                    Some(job) => format!(" (gpuq metrics {job} counts them)"),
                    None => String::new(),
                };
                NewAlert {
                    at: gpuq_api::home::now_ms(),
                    kind: AlertKind::MetricsDropped,
                    job: d.job,
                    user: user.clone(),
                    gpu: None,
                    message: format!(
                        "{what}: metrics over the {} ({limit}): the excess is dropped{more}",
                        reason.as_str()
                    ),
                }
            })
            .collect();
        self.raise(alerts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> MetricsGate {
        MetricsGate::new(Rates {
            run: 10,
            run_burst: 100,
            user: 15,
            user_burst: 150,
        })
    }

    #[test]
    fn a_burst_then_the_rate_and_the_rest_is_counted() {
        let mut g = gate();
        let t0 = Instant::now();
        assert_eq!(g.admit("1", "alice", 150, t0), 100);
        assert_eq!(g.take("1").get(&DropReason::Rate), Some(&50));
        assert_eq!(g.admit("1", "alice", 50, t0 + Duration::from_secs(2)), 20);
        assert_eq!(g.take("1").get(&DropReason::Rate), Some(&30));
        assert!(g.take("1").is_empty());
    }

    #[test]
    fn submits_past_the_burst_wait_for_the_rate() {
        let mut g = SubmitGate::default();
        let t0 = Instant::now();
        assert!(g.admit("ann", 8, 2, 10, t0));
        assert!(g.admit("ann", 2, 2, 10, t0));
        assert!(!g.admit("ann", 1, 2, 10, t0), "the burst is spent");
        assert!(
            g.admit("bob", 1, 2, 10, t0),
            "another user's bucket is their own"
        );
        let later = t0 + Duration::from_secs(1);
        assert!(g.admit("ann", 2, 2, 10, later));
        assert!(!g.admit("ann", 1, 2, 10, later));
        // An array larger than the burst goes through a full bucket.
        assert!(g.admit("cy", 50, 2, 10, t0));
        assert!(!g.admit("cy", 1, 2, 10, t0));
    }

    #[test]
    fn a_users_runs_share_the_users_bucket() {
        let mut g = gate();
        let t0 = Instant::now();
        assert_eq!(g.admit("1", "alice", 100, t0), 100);
        assert_eq!(
            g.admit("2", "alice", 100, t0),
            50,
            "the user's burst is 150"
        );
        assert_eq!(
            g.admit("3", "bob", 100, t0),
            100,
            "another user is not slowed"
        );
    }
}
