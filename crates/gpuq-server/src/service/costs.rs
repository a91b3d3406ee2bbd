//! Cost reports, budgets and their enforcement. Every figure is computed from the
//! attempts table with the exact arithmetic of `gpuq_core::cost`, so a report,
//! a budget and `gpuq show` agree to the micro-dollar.

use super::stop::StopCause;
use super::{Service, ServiceError};
use crate::config::{BudgetAction, BudgetConfig, BudgetPeriod};
use gpuq_api::{BudgetStatus, CostReport, CostRow};
use gpuq_core::alerts::{AlertKind, NewAlert};
use gpuq_core::cost::{cost_within, worst_case, Micros};
use gpuq_core::{JobId, JobSpec, JobState, Millis};
use gpuq_store::UsageRow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a report groups attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    User,
    Project,
    Job,
    Day,
    /// Each user's cost per day (keys `DAY/USER`): spending over time.
    UserDay,
    /// Each project's cost per day (keys `DAY/PROJECT`).
    ProjectDay,
}

impl GroupBy {
    /// The name `by` takes (and a report gives back).
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::User => "user",
            GroupBy::Project => "project",
            GroupBy::Job => "job",
            GroupBy::Day => "day",
            GroupBy::UserDay => "user,day",
            GroupBy::ProjectDay => "project,day",
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "user" => Ok(GroupBy::User),
            "project" => Ok(GroupBy::Project),
            "job" => Ok(GroupBy::Job),
            "day" => Ok(GroupBy::Day),
            "user,day" | "day,user" => Ok(GroupBy::UserDay),
            "project,day" | "day,project" => Ok(GroupBy::ProjectDay),
            _ => Err(format!(
                "by: {s:?} is not a grouping; use user, project, job, day, user,day or project,day"
            )),
        }
    }
}

fn period_name(p: BudgetPeriod) -> &'static str {
    match p {
        BudgetPeriod::Day => "day",
        BudgetPeriod::Week => "week",
        BudgetPeriod::Month => "month",
    }
}

fn action_name(a: BudgetAction) -> &'static str {
    match a {
        BudgetAction::Refuse => "refuse",
        BudgetAction::Hold => "hold",
        BudgetAction::Stop => "stop",
    }
}

/// The label a budget action puts on the jobs it holds, so lifting it releases only those.
pub const BUDGET_HOLDER: &str = "budget";

impl Service {
    /// Cost grouped by `by` over `since`..`until` (running attempts count up to `now`).
    pub fn cost_report(
        &self,
        by: GroupBy,
        since: Millis,
        until: Millis,
        now: Millis,
    ) -> Result<CostReport, ServiceError> {
        let rows = self
            .lock()
            .store
            .usage_rows_between(since, until.min(now))?;
        let mut groups: BTreeMap<String, CostRow> = BTreeMap::new();
        let p = &self.pricing;
        let mut add = |key: String, r: &UsageRow, from: Millis, to: Millis| {
            let end = r.ended_at.unwrap_or(now);
            let (a, b) = (from.max(r.started_at), to.min(end));
            if b <= a {
                return;
            }
            let row = groups.entry(key.clone()).or_insert_with(|| CostRow {
                key,
                cost: None,
                gpu_hours: 0.0,
                used_gpu_hours: None,
                attempts: 0,
                unpriced_hours: 0.0,
            });
            let hours = (b - a) as f64 / 3_600_000.0;
            row.attempts += 1;
            row.gpu_hours += r.gpus as f64 * hours;
            if let Some(util) = r.gpu_usage.as_ref().and_then(|u| u.util_avg_percent) {
                *row.used_gpu_hours.get_or_insert(0.0) += r.gpus as f64 * hours * util / 100.0;
            }
            match r.rate {
                Some(rate) => {
                    *row.cost.get_or_insert(Micros::ZERO) +=
                        cost_within(rate, r.started_at, end, from, to)
                }
                // GPU-hours, as `gpu_hours` counts them: with no price at all, the two agree.
                None => row.unpriced_hours += r.gpus as f64 * hours,
            }
        };
        for r in &rows {
            match by {
                GroupBy::User => add(r.user.clone(), r, since, until),
                GroupBy::Project => add(
                    r.project.clone().unwrap_or_else(|| "-".into()),
                    r,
                    since,
                    until,
                ),
                GroupBy::Job => add(r.job.to_string(), r, since, until),
                GroupBy::Day | GroupBy::UserDay | GroupBy::ProjectDay => {
                    let end = r.ended_at.unwrap_or(now).min(until);
                    let days = p.day_starts(r.started_at.max(since), end);
                    for (i, (day, start)) in days.iter().enumerate() {
                        let next = days.get(i + 1).map_or(end, |d| d.1);
                        let key = match by {
                            GroupBy::UserDay => format!("{day}/{}", r.user),
                            GroupBy::ProjectDay => {
                                format!("{day}/{}", r.project.as_deref().unwrap_or("-"))
                            }
                            _ => day.to_string(),
                        };
                        add(key, r, (*start).max(since), next.min(until));
                    }
                }
            }
        }
        let mut rows: Vec<CostRow> = groups.into_values().collect();
        // Attempts that cover several days or pieces were counted once per piece.
        if by == GroupBy::Job {
            rows.sort_by_key(|r| r.key.parse::<u64>().unwrap_or(0));
        }
        let priced: Vec<Micros> = rows.iter().filter_map(|r| r.cost).collect();
        Ok(CostReport {
            by: by.name().to_string(),
            since,
            until,
            timezone: p.tz_name(),
            window: format!("{} to {}", p.show(since), p.show(until.min(now))),
            pricing: p.basis.clone(),
            total: (!priced.is_empty()).then(|| priced.into_iter().sum()),
            gpu_hours: rows.iter().map(|r| r.gpu_hours).sum(),
            rows,
            budgets: self.budget_statuses(now)?,
        })
    }

    fn spent(
        &self,
        budget: &BudgetConfig,
        from: Millis,
        to: Millis,
        now: Millis,
    ) -> Result<Micros, ServiceError> {
        let rows = self.lock().store.usage_rows_between(from, to.min(now))?;
        Ok(rows
            .iter()
            .filter(|r| match (&budget.user, &budget.project) {
                (Some(u), _) => &r.user == u,
                (_, Some(p)) => r.project.as_ref() == Some(p),
                _ => false,
            })
            .filter_map(|r| {
                Some(cost_within(
                    r.rate?,
                    r.started_at,
                    r.ended_at.unwrap_or(now),
                    from,
                    to,
                ))
            })
            .sum())
    }

    pub fn budget_statuses(&self, now: Millis) -> Result<Vec<BudgetStatus>, ServiceError> {
        let mut out = Vec::new();
        for b in &self.config.budgets {
            let (from, to) = self.pricing.period(b.period, now);
            let limit = Micros::from_dollars(b.amount).unwrap_or_default();
            let spent = self.spent(b, from, to, now)?;
            let (scope, name) = match (&b.user, &b.project) {
                (Some(u), _) => ("user", u.clone()),
                (_, p) => ("project", p.clone().unwrap_or_default()),
            };
            out.push(BudgetStatus {
                scope: scope.into(),
                name,
                period: period_name(b.period).into(),
                period_start: from,
                period_end: to,
                limit,
                spent,
                left: limit.saturating_sub(spent),
                percent: if limit.0 > 0 {
                    spent.0 as f64 * 100.0 / limit.0 as f64
                } else {
                    100.0
                },
                action: action_name(b.action).into(),
                exhausted: spent >= limit,
            });
        }
        Ok(out)
    }

    /// Refuses a submit its user's or project's budget cannot pay for: the budget is
    /// spent, or the job's worst case (its time limit) exceeds what is left.
    pub(super) fn check_budget(
        &self,
        user: &str,
        spec: &JobSpec,
        now: Millis,
    ) -> Result<(), ServiceError> {
        if self.config.budgets.is_empty() {
            return Ok(());
        }
        let rate = self.pricing.rate(spec.gpus);
        for (b, status) in self.config.budgets.iter().zip(self.budget_statuses(now)?) {
            let applies = b.user.as_deref() == Some(user)
                || (b.project.is_some() && b.project == spec.project);
            if !applies {
                continue;
            }
            let who = match status.scope.as_str() {
                "user" => status.name.clone(),
                _ => format!("project {}", status.name),
            };
            let period = format!("this {}", status.period);
            if status.exhausted {
                return Err(ServiceError::Budget(format!(
                    "{who}'s budget of {} for {period} is spent ({} so far); new jobs are refused until {}; \
                     ask an admin to raise budgets in gpuq.toml",
                    status.limit,
                    status.spent,
                    self.pricing.show(status.period_end)
                )));
            }
            if let (Some(rate), Some(limit)) = (rate, spec.time_limit) {
                let worst = worst_case(rate, limit.as_millis());
                if worst > status.left {
                    return Err(ServiceError::Budget(format!(
                        "this job may cost up to {worst} ({} for {limit} at {rate}/h); {who} has {} left {period}; \
                         shorten --time-limit, use fewer GPUs, or ask an admin to raise the budget",
                        gpuq_core::plural(spec.gpus.into(), "GPU"),
                        status.left
                    )));
                }
            }
        }
        Ok(())
    }

    /// Budget alerts at their thresholds (once per period), and the 100% action.
    pub(super) fn enforce_budgets(self: &Arc<Self>, now: Millis) {
        let statuses = match self.budget_statuses(now) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot compute budgets: {e}");
                return;
            }
        };
        let mut alerts = Vec::new();
        for (i, (b, s)) in self.config.budgets.iter().zip(&statuses).enumerate() {
            for threshold in &b.alert_at {
                if s.percent < *threshold as f64 {
                    continue;
                }
                // Once per budget, threshold and period, across restarts.
                let key = format!("budget-alert/{i}/{threshold}/{}", s.period_start);
                let mut inner = self.lock();
                if inner.store.meta(&key).ok().flatten().is_some() {
                    continue;
                }
                let _ = inner.store.set_meta(&key, "1");
                drop(inner);
                alerts.push(NewAlert {
                    at: now,
                    kind: AlertKind::Budget,
                    job: None,
                    user: b.user.clone(),
                    gpu: None,
                    message: format!(
                        "{} {}'s budget: {} of {} spent this {} ({:.0}%, alert at {threshold}%){}",
                        s.scope,
                        s.name,
                        s.spent,
                        s.limit,
                        s.period,
                        s.percent,
                        if s.exhausted {
                            format!("; action: {}", s.action)
                        } else {
                            String::new()
                        }
                    ),
                });
            }
            if s.exhausted {
                self.apply_budget_action(b, s);
            } else {
                self.release_budget_holds(b, &statuses);
            }
        }
        self.raise(alerts);
    }

    /// A new period (or a raised budget): jobs the budget held go again, unless
    /// another exhausted budget still covers them.
    fn release_budget_holds(self: &Arc<Self>, b: &BudgetConfig, statuses: &[BudgetStatus]) {
        let covered_by_spent = |user: &str, project: Option<&str>| {
            self.config.budgets.iter().zip(statuses).any(|(other, st)| {
                st.exhausted
                    && (other.user.as_deref() == Some(user)
                        || (other.project.is_some() && other.project.as_deref() == project))
            })
        };
        let held: Vec<JobId> = {
            let inner = self.lock();
            inner
                .pending
                .values()
                .filter(|p| p.held)
                .filter(|p| match (&b.user, &b.project) {
                    (Some(u), _) => *u == *p.user,
                    (_, Some(pr)) => p.project.as_deref() == Some(pr.as_str()),
                    _ => false,
                })
                .filter(|p| !covered_by_spent(&p.user, p.project.as_deref()))
                .map(|p| p.id)
                .collect()
        };
        for id in held {
            // Only the budget's own holds: a user's `gpuq hold` stays.
            let by_budget = self
                .job(id)
                .is_ok_and(|j| j.held_by.as_deref() == Some(BUDGET_HOLDER));
            if by_budget {
                if let Err(e) = self.hold(id, false, BUDGET_HOLDER) {
                    tracing::warn!("budget: cannot release job {id}: {e}");
                }
            }
        }
    }

    fn apply_budget_action(self: &Arc<Self>, b: &BudgetConfig, s: &BudgetStatus) {
        if b.action == BudgetAction::Refuse {
            return;
        }
        let in_scope = |user: &str, project: Option<&str>| match (&b.user, &b.project) {
            (Some(u), _) => u == user,
            (_, Some(p)) => project == Some(p.as_str()),
            _ => false,
        };
        let (to_hold, to_stop): (Vec<JobId>, Vec<JobId>) = {
            let inner = self.lock();
            let hold = inner
                .pending
                .values()
                .filter(|p| !p.held && in_scope(&p.user, p.project.as_deref()))
                .map(|p| p.id)
                .collect();
            let stop = if b.action == BudgetAction::Stop {
                inner
                    .running
                    .iter()
                    .filter(|(_, r)| r.stop.is_none() && in_scope(&r.user, r.project.as_deref()))
                    .map(|(id, _)| *id)
                    .collect()
            } else {
                vec![]
            };
            (hold, stop)
        };
        for id in to_hold {
            if let Err(e) = self.hold(id, true, BUDGET_HOLDER) {
                tracing::warn!("budget: cannot hold job {id}: {e}");
            }
        }
        for id in to_stop {
            let by = format!(
                "budget ({} {}'s {} budget of {} is spent)",
                s.scope, s.name, s.period, s.limit
            );
            self.stop(id, StopCause::Cancel { by });
        }
    }

    pub fn pricing(&self) -> &crate::pricing::Pricing {
        &self.pricing
    }

    /// Right-sizing advice for a job from its telemetry and the catalog.
    pub fn advice(&self, id: JobId) -> Result<gpuq_core::advice::Advice, ServiceError> {
        let now = gpuq_api::home::now_ms();
        let mut job = self.job(id)?;
        self.add_live_state(&mut job, now);
        let attempts = self.with_store(|s| s.attempts(id))?;
        let usage = self.job_gpu_usage(&job, &attempts);
        let runtime_ms = attempts
            .iter()
            .map(|a| a.ended_at.unwrap_or(now) - a.started_at)
            .sum();
        let card = attempts
            .last()
            .and_then(|a| a.gpus.first())
            .and_then(|g| self.gpus.iter().find(|info| info.index == *g));
        let catalog = &self.pricing.catalog;
        let model = card.and_then(|c| catalog.model_for(&c.model, c.memory_mib));
        let host = gpuq_core::advice::HostFigures::of_attempts(&attempts, &job.spec);
        Ok(gpuq_core::advice::advise(&gpuq_core::advice::AdviceInput {
            job: id,
            gpus: job.gpus_requested,
            model,
            card_memory_mib: card.map_or(0, |c| c.memory_mib),
            usage: usage.as_ref(),
            runtime_ms,
            cost: job.cost,
            catalog,
            host: host.as_ref(),
        }))
    }

    /// The live part of a running job: the running attempt's cost so far, and
    /// the backend's words on it (a pending reason in Slurm's queue).
    pub fn add_live_state(&self, job: &mut gpuq_core::Job, now: Millis) {
        if job.state != JobState::Running {
            return;
        }
        if let Some(r) = self.backend.status(job.id) {
            job.reason = Some(r);
        }
        let inner = self.lock();
        if let Some(run) = inner.running.get(&job.id).filter(|r| r.began) {
            if let Some(rate) = run.rate {
                let running = gpuq_core::cost::cumulative(rate, now - run.started_at);
                job.cost = Some(job.cost.unwrap_or_default() + running);
            }
        }
        drop(inner);
        if let Some(note) = self.session_note(job.id, now) {
            job.reason = Some(note);
        }
        self.add_live_host_usage(job);
    }
}
