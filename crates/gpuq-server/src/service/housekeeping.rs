//! The daemon's clock-driven duties, run every second: schedules (cron), the
//! idle stop (autostop), and budget enforcement. Each takes `now` so tests can
//! drive them with an injected clock.

use super::Service;
use crate::config::{AutostopConfig, ScheduleAction, ScheduleConfig};
use crate::pricing::Pricing;
use gpuq_api::home::now_ms;
use gpuq_api::{AutostopStatus, ScheduleInfo, SubmitRequest};
use gpuq_core::alerts::{AlertKind, NewAlert};
use gpuq_core::cron::Cron;
use gpuq_core::{DurationSpec, Millis};
use std::sync::Arc;
use std::time::Duration;

/// How often budgets are recomputed (they read the attempts table).
const BUDGET_EVERY: Millis = 5_000;
const AUTOSTOP_META: &str = "autostop";

pub struct Housekeeping {
    schedules: Vec<ScheduleState>,
    pub autostop: Option<AutostopConfig>,
    idle_since: Option<Millis>,
    warned: bool,
    acted: bool,
    last_budget_check: Millis,
}

struct ScheduleState {
    config: ScheduleConfig,
    cron: Cron,
    next: Option<Millis>,
    last_run: Option<Millis>,
}

/// The first run of `cron` strictly after `after`, in the pricing's time zone.
pub fn next_run(cron: &Cron, pricing: &Pricing, after: Millis) -> Option<Millis> {
    // Cron works in whole seconds: start from the second `after` falls in.
    let mut from = pricing.civil(after);
    for _ in 0..4 {
        let civil = cron.next_after(from)?;
        // A wall-clock time skipped by a DST change maps forward; never into the past.
        match pricing.instant(civil) {
            Some(at) if at > after => return Some(at),
            _ => from = civil,
        }
    }
    None
}

impl Housekeeping {
    pub fn new(
        schedules: &[ScheduleConfig],
        autostop: Option<AutostopConfig>,
        pricing: &Pricing,
        now: Millis,
    ) -> Self {
        let schedules = schedules
            .iter()
            .filter_map(|c| {
                let cron: Cron = c.cron.parse().ok()?; // validated when the config was read
                Some(ScheduleState {
                    next: next_run(&cron, pricing, now),
                    config: c.clone(),
                    cron,
                    last_run: None,
                })
            })
            .collect();
        Self {
            schedules,
            autostop,
            idle_since: None,
            warned: false,
            acted: false,
            last_budget_check: 0,
        }
    }
}

impl Service {
    pub fn housekeeping(&self) -> std::sync::MutexGuard<'_, Housekeeping> {
        self.housekeeping.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs every second until the daemon stops.
    pub async fn housekeeping_loop(self: Arc<Self>) {
        if let Ok(Some(saved)) = self.lock().store.meta(AUTOSTOP_META) {
            self.housekeeping().autostop = serde_json::from_str(&saved).ok().flatten();
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let this = self.clone();
            // Budgets and schedules read the store: keep them off the async workers.
            let _ = tokio::task::spawn_blocking(move || this.housekeeping_tick(now_ms())).await;
        }
    }

    pub fn housekeeping_tick(self: &Arc<Self>, now: Millis) {
        self.ingest_running_metrics();
        self.flush_metric_drops();
        self.advance_sweeps();
        self.run_due_schedules(now);
        self.check_idle(now);
        let due = {
            let mut h = self.housekeeping();
            let due = now - h.last_budget_check >= BUDGET_EVERY;
            if due {
                h.last_budget_check = now;
            }
            due
        };
        if due && !self.config.budgets.is_empty() {
            self.enforce_budgets(now);
        }
    }

    fn run_due_schedules(self: &Arc<Self>, now: Millis) {
        let due: Vec<ScheduleConfig> = {
            let mut h = self.housekeeping();
            let mut due = Vec::new();
            for s in &mut h.schedules {
                if s.next.is_some_and(|at| at <= now) {
                    due.push(s.config.clone());
                    s.last_run = Some(now);
                    // Runs missed while the daemon was down are not caught up: the next one is after now.
                    s.next = next_run(&s.cron, &self.pricing, now);
                }
            }
            due
        };
        for s in due {
            let outcome = match s.action {
                ScheduleAction::Drain => {
                    self.set_drained(true).map(|_| "queue drained".to_string())
                }
                ScheduleAction::Undrain => self
                    .set_drained(false)
                    .map(|_| "queue undrained".to_string()),
                ScheduleAction::Submit => self.scheduled_submit(&s),
            };
            match outcome {
                Ok(what) => tracing::info!("schedule {}: {what}", s.name),
                Err(e) => tracing::error!("schedule {} failed: {e}", s.name),
            }
        }
    }

    fn scheduled_submit(
        self: &Arc<Self>,
        s: &ScheduleConfig,
    ) -> Result<String, super::ServiceError> {
        let path = s.spec.as_deref().unwrap_or(std::path::Path::new(""));
        let user = s
            .user
            .clone()
            .unwrap_or_else(|| self.identity.owner.clone());
        let spec = self
            .read_spec_as(path, &user)
            .map_err(super::ServiceError::Conflict)?;
        let cwd = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "/".into());
        let env = [("PATH", std::env::var("PATH").unwrap_or_default())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let caller = self.identity.owner_caller();
        let job = self.submit(
            SubmitRequest {
                spec,
                cwd,
                env,
                user,
                idempotency_key: None,
                repro: None,
            },
            &caller,
        )?;
        Ok(format!("submitted job {}", job.id))
    }

    /// A schedule's spec file, read with its user's rights: the file usually lives
    /// in that user's directory, and root must not read for them what they could
    /// not (a link to a root-only file, a FIFO).
    fn read_spec_as(
        &self,
        path: &std::path::Path,
        user: &str,
    ) -> Result<gpuq_core::JobSpec, String> {
        const MAX_SPEC: u64 = 4 << 20;
        let account = self.identity.job_account(user)?;
        // Every file of the spec (its environment's too) is read with the
        // user's rights, or, for the daemon's own jobs, only from trusted paths.
        let read = |p: &std::path::Path, max: u64| -> Result<String, String> {
            let bytes = match &account {
                Some(account) => {
                    gpuq_exec::safe_fs::read_as(p, account, max, Duration::from_secs(5))
                        .map_err(|e| e.to_string())?
                }
                None => {
                    // SAFETY: geteuid cannot fail.
                    if unsafe { libc::geteuid() } == 0 {
                        gpuq_exec::safe_fs::check_trusted(p, 0)?;
                    }
                    let mut bytes = Vec::new();
                    use std::io::Read;
                    std::fs::File::open(p)
                        .and_then(|f| f.take(max).read_to_end(&mut bytes))
                        .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                    bytes
                }
            };
            String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", p.display()))
        };
        let text = read(path, MAX_SPEC)?;
        let base = path.parent().unwrap_or(std::path::Path::new("/"));
        let inputs = |p: &std::path::Path| read(p, gpuq_core::pyenv::MAX_INPUT_BYTES as u64);
        gpuq_api::spec_file::parse_with_inputs(&text, base, &inputs)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        let h = self.housekeeping();
        h.schedules
            .iter()
            .map(|s| {
                let mut next = Vec::new();
                let mut at = s.next;
                while let (Some(t), true) = (at, next.len() < 3) {
                    next.push(t);
                    at = next_run(&s.cron, &self.pricing, t);
                }
                ScheduleInfo {
                    name: s.config.name.clone(),
                    cron: s.cron.as_str().to_string(),
                    timezone: self.pricing.tz_name(),
                    action: format!("{:?}", s.config.action).to_lowercase(),
                    spec: s.config.spec.as_ref().map(|p| p.display().to_string()),
                    user: s.config.user.clone(),
                    next_local: next.iter().map(|t| self.pricing.show(*t)).collect(),
                    next,
                    last_run: s.last_run,
                }
            })
            .collect()
    }

    /// The node is busy while a job without GPUs runs, or a GPU job's GPU is above
    /// the threshold (or has no reading: without telemetry nothing is called idle).
    fn node_busy(&self, threshold: f64) -> bool {
        let jobs: Vec<Vec<u32>> = self
            .lock()
            .running
            .values()
            .map(|r| r.local_gpus().to_vec())
            .collect();
        let monitor = self.monitor();
        jobs.iter().any(|gpus| {
            gpus.is_empty()
                || gpus.iter().any(|g| {
                    match monitor
                        .readings()
                        .iter()
                        .find(|r| r.index == *g)
                        .and_then(|r| r.util_percent)
                    {
                        Some(u) => u > threshold,
                        None => true,
                    }
                })
        })
    }

    fn check_idle(self: &Arc<Self>, now: Millis) {
        let Some(cfg) = self.housekeeping().autostop.clone() else {
            return;
        };
        let busy = self.node_busy(cfg.util_percent);
        let mut alerts = Vec::new();
        let mut act = false;
        {
            let mut h = self.housekeeping();
            if busy {
                (h.idle_since, h.warned, h.acted) = (None, false, false);
                return;
            }
            let since = *h.idle_since.get_or_insert(now);
            let idle = now - since;
            let window = cfg.idle_after.as_millis() as i64;
            let warn_at = window - cfg.warn_before.as_millis() as i64;
            let what = cfg
                .command
                .as_ref()
                .map(|c| format!("run `{c}`"))
                .unwrap_or_else(|| "drain the queue".into());
            if idle >= warn_at && !h.warned && !h.acted {
                h.warned = true;
                alerts.push(self.idle_alert(
                    now,
                    format!(
                        "node idle for {} (no job uses its GPUs above {}%); autostop will {what} in {}{}",
                        DurationSpec::from_millis(idle.max(1000) as u64),
                        cfg.util_percent,
                        DurationSpec::from_millis((window - idle).max(1000) as u64),
                        if cfg.dry_run { " (dry run)" } else { "" }
                    ),
                ));
            }
            if idle >= window && !h.acted {
                h.acted = true;
                act = true;
                if cfg.dry_run {
                    alerts.push(
                        self.idle_alert(now, format!("autostop (dry run): would {what} now")),
                    );
                }
            }
        }
        self.raise(alerts);
        if act && !cfg.dry_run {
            self.autostop_act(&cfg);
        }
    }

    fn idle_alert(&self, now: Millis, message: String) -> NewAlert {
        NewAlert {
            at: now,
            kind: AlertKind::NodeIdle,
            job: None,
            user: None,
            gpu: None,
            message,
        }
    }

    fn autostop_act(self: &Arc<Self>, cfg: &AutostopConfig) {
        let now = now_ms();
        let message = match &cfg.command {
            None => match self.set_drained(true) {
                Ok(()) => {
                    "autostop: the node was idle; the queue is drained (gpuq undrain resumes it)"
                        .to_string()
                }
                Err(e) => format!("autostop: cannot drain the queue: {e}"),
            },
            // A setting saved by an older daemon, or a config changed since: still only
            // what the config names now.
            Some(command) if !self.config.autostop_commands().contains(&command.as_str()) => {
                format!(
                    "autostop: the node was idle; not running `{command}`: gpuq.toml no longer names it"
                )
            }
            Some(command) => match std::process::Command::new("sh")
                .args(["-c", command])
                .stdin(std::process::Stdio::null())
                .spawn()
            {
                Ok(mut child) => {
                    // Reap it in the background; its exit is logged.
                    let cmd = command.clone();
                    std::thread::spawn(move || match child.wait() {
                        Ok(s) => tracing::info!("autostop command `{cmd}` ended: {s}"),
                        Err(e) => tracing::warn!("autostop command `{cmd}`: {e}"),
                    });
                    format!("autostop: the node was idle; ran `{command}`")
                }
                Err(e) => format!("autostop: cannot run `{command}`: {e}"),
            },
        };
        self.raise(vec![self.idle_alert(now, message)]);
    }

    pub fn autostop_status(&self) -> AutostopStatus {
        let h = self.housekeeping();
        let c = h.autostop.as_ref();
        AutostopStatus {
            idle_after: c.map(|c| c.idle_after.to_string()),
            util_percent: c.map_or(5.0, |c| c.util_percent),
            warn_before: c.map_or("5m".into(), |c| c.warn_before.to_string()),
            command: c.and_then(|c| c.command.clone()),
            dry_run: c.is_some_and(|c| c.dry_run),
            idle_since: h.idle_since,
        }
    }

    /// The commands autostop may run: those gpuq.toml names, nothing else.
    pub fn allowed_autostop_commands(&self) -> Vec<String> {
        self.config
            .autostop_commands()
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    pub fn configured_autostop_command(&self) -> Option<String> {
        self.config
            .autostop
            .as_ref()
            .and_then(|a| a.command.clone())
    }

    /// What a partial `POST /v1/autostop` starts from: the setting in force,
    /// else gpuq.toml's `[autostop]` (also when an earlier request turned it off).
    pub fn autostop_base(&self) -> Option<AutostopConfig> {
        self.housekeeping()
            .autostop
            .clone()
            .or_else(|| self.config.autostop.clone())
    }

    /// `gpuq autostop 30m` / `off`: persisted, overrides `[autostop]` of the config.
    pub fn set_autostop(
        &self,
        cfg: Option<AutostopConfig>,
    ) -> Result<AutostopStatus, super::ServiceError> {
        let json = serde_json::to_string(&cfg).unwrap_or_else(|_| "null".into());
        self.lock().store.set_meta(AUTOSTOP_META, &json)?;
        {
            let mut h = self.housekeeping();
            h.autostop = cfg;
            (h.idle_since, h.warned, h.acted) = (None, false, false);
        }
        Ok(self.autostop_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pricing(tz: &str) -> Pricing {
        let c = crate::config::Config::parse(&format!("[cost]\ntimezone = \"{tz}\"\n")).unwrap();
        Pricing::resolve(&c.cost).unwrap()
    }

    #[test]
    fn next_runs_follow_the_zone_with_an_injected_clock() {
        let p = pricing("Asia/Shanghai");
        let cron: Cron = "0 9 * * 1-5".parse().unwrap();
        // Saturday 2026-11-28 12:00 UTC → Monday 09:00 Shanghai = 01:00 UTC.
        let sat = 1_795_867_200_000;
        let next = next_run(&cron, &p, sat).unwrap();
        assert_eq!(p.show(next), "2026-11-30 09:00:00 CST");
        let after = next_run(&cron, &p, next).unwrap();
        assert_eq!(after - next, 86_400_000);
    }

    #[test]
    fn a_time_skipped_by_daylight_saving_does_not_run_twice_or_in_the_past() {
        let p = pricing("America/New_York");
        // 2:30 does not exist on 2026-03-08 in New York (clocks jump 2:00 → 3:00).
        let cron: Cron = "30 2 * * *".parse().unwrap();
        let before = 1_772_924_400_000; // 2026-03-07 23:00 UTC = 18:00 EST
        let next = next_run(&cron, &p, before).unwrap();
        assert!(next > before);
        let again = next_run(&cron, &p, next).unwrap();
        assert!(again > next);
        assert_eq!(p.show(again), "2026-03-09 02:30:00 EDT");
    }
}
