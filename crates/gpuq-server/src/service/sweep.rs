//! Sweeps, driven by the pure searcher (gpuq-core::sweep) over ordinary jobs.
//!
//! A trial is a job. At its rung it saves a checkpoint and exits; its job goes
//! back to the queue held by the sweep (paused: no GPU held), and the searcher
//! hears of it. A promotion raises the trial's step limit and releases the
//! hold, so the same job, with the same checkpoint directory, resumes. A trial
//! never promoted is cancelled when the search ends.
//!
//! `advance` is level-triggered: it compares what the searcher believes with
//! what the trials' jobs are, feeds the difference in, asks for decisions and
//! commits the searcher's new state with their effects in one transaction. It
//! runs after a trial's attempt ends and on every housekeeping tick, so a
//! daemon killed at any point finishes the step on its next tick, without
//! losing or repeating a trial.

use super::{Service, ServiceError};
use crate::identity::Caller;
use gpuq_api::sweep::{
    BestTrial, RungAnswer, SweepDetail, SweepRequest, SweepSummary, SweepUsage, TrialInfo,
};
use gpuq_api::tracking::MetricValue;
use gpuq_core::sweep::{
    attempts_within, Decision, Goal, Searcher, SweepBudget, SweepError, SweepSpec, TrialEnd,
    TrialState,
};
use gpuq_core::{Job, JobId, JobSpec, JobState, SpecError};
use gpuq_store::sweeps::{
    pause_hold, NewSweep, NewTrial, SweepRow, SweepStep, TrialRow, TrialUsage,
};
use gpuq_store::NewJob;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const MS_PER_HOUR: f64 = 3_600_000.0;

/// A sweep as stored: its row, its request, its searcher, its trials' jobs.
type Loaded = (SweepRow, StoredSweep, Searcher, Vec<(TrialRow, Job)>);

/// What the store keeps of a sweep request: the trials' job, resolved.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSweep {
    spec: JobSpec,
    sweep: SweepSpec,
    budget: Option<SweepBudget>,
    cwd: String,
    env: BTreeMap<String, String>,
    repro: Option<String>,
}

impl From<SweepError> for ServiceError {
    fn from(e: SweepError) -> Self {
        match e {
            SweepError::Invalid { field, message } => SpecError::new(field, message).into(),
            other => ServiceError::Conflict(other.to_string()),
        }
    }
}

/// The state a trial shows, from its job (the truth) and the searcher.
fn trial_state(job: &Job, searched: Option<TrialState>, sweep: i64) -> &'static str {
    match job.state {
        JobState::Queued if job.held_by.as_deref() == Some(pause_hold(sweep).as_str()) => "paused",
        JobState::Queued | JobState::Preempted => "queued",
        JobState::Running => "running",
        JobState::Succeeded => "completed",
        JobState::Failed | JobState::Lost => "failed",
        JobState::Cancelled if searched == Some(TrialState::Stopped) => "stopped",
        JobState::Cancelled => "cancelled",
    }
}

/// What one more attempt could use at worst, in the budget's unit.
fn worst_attempt(budget: &SweepBudget, spec: &JobSpec, rate: Option<i64>) -> Option<f64> {
    let hours = spec.time_limit?.as_millis() as f64 / MS_PER_HOUR;
    match budget {
        SweepBudget::GpuHours(_) => Some(hours * f64::from(spec.gpus.max(1))),
        SweepBudget::Dollars(_) => Some(hours * rate? as f64 / 1e6),
    }
}

fn used_of(usage: &[TrialUsage], priced: bool) -> SweepUsage {
    SweepUsage {
        gpu_hours: usage.iter().map(|u| u.gpu_ms as f64).sum::<f64>() / MS_PER_HOUR,
        dollars: priced.then(|| usage.iter().map(|u| u.cost_micros as f64).sum::<f64>() / 1e6),
    }
}

impl Service {
    /// Creates a sweep for `caller` and starts its first trials.
    pub fn create_sweep(
        self: &Arc<Self>,
        req: SweepRequest,
        caller: &Caller,
    ) -> Result<SweepDetail, ServiceError> {
        let mut spec = req.spec;
        spec.validate()?;
        let name = spec
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| SpecError::new("name", "a sweep needs a name, e.g. name: mlp-lr"))?;
        req.sweep.validate()?;
        if spec.array.is_some() {
            return Err(SpecError::new(
                "array",
                "a sweep's trials are single jobs; remove array (searcher.max_concurrent says how many run at once)",
            )
            .into());
        }
        if let Some(b) = &req.budget {
            b.validate()?;
            let rate = self.pricing.rate(spec.gpus).map(|m| m.0);
            if spec.time_limit.is_none() {
                return Err(SpecError::new(
                    "time_limit",
                    format!(
                        "a sweep with a budget ({b}) needs the trials' time_limit, so that what one attempt may use is known; add e.g. time_limit: 1h"
                    ),
                )
                .into());
            }
            if matches!(b, SweepBudget::Dollars(_)) && rate.is_none() {
                return Err(SpecError::new(
                    "budget.dollars",
                    "this daemon has no GPU prices ([cost] in gpuq.toml); use budget: {gpu_hours: N}",
                )
                .into());
            }
        }
        // Sampled params must be params a run can record.
        let mut probe = spec.clone();
        for k in req.sweep.parameters.keys() {
            probe.params.insert(k.clone(), serde_json::Value::from(0));
        }
        probe.validate()?;
        self.check_placeable(&spec)?;
        let user = self.submitter(&req.user, caller)?;
        let cwd = spec.cwd.clone().unwrap_or(req.cwd);
        self.check_cwd_of(&user, &cwd)?;
        spec.cwd = Some(cwd.clone());
        let mut env = req.env;
        env.extend(spec.env.clone());
        let seed = req.seed.unwrap_or_else(|| {
            // Any seed will do; it is recorded so the sweep can be replayed.
            let t = super::now_ms() as u64;
            t ^ (t >> 17).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        let searcher = Searcher::new(&req.sweep, seed)?;
        let repro = super::repro::completed(req.repro, &spec, &cwd, &env);
        let stored = StoredSweep {
            spec: spec.clone(),
            sweep: req.sweep,
            budget: req.budget,
            cwd,
            env,
            repro,
        };
        let file = serde_json::to_string(&stored).expect("sweep serializes");
        let state = serde_json::to_string(&searcher).expect("searcher serializes");
        let now = super::now_ms();
        let id = self.lock().store.create_sweep(
            &NewSweep {
                name: &name,
                user: &user,
                project: spec.project.as_deref(),
                file: &file,
                seed,
                searcher: &state,
            },
            now,
        )?;
        self.advance_sweep(id);
        self.sweep_detail(id)
    }

    /// Every running sweep takes a step (the housekeeping tick, and after a restart).
    pub(super) fn advance_sweeps(self: &Arc<Self>) {
        let ids = match self.lock().store.running_sweeps() {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!("cannot list sweeps: {e}");
                return;
            }
        };
        for id in ids {
            self.advance_sweep(id);
        }
    }

    /// The trial a job is, if it is one.
    pub(super) fn trial_of(&self, job: JobId) -> Option<TrialRow> {
        self.lock().store.trial_of_job(job).ok().flatten()
    }

    pub(super) fn advance_sweep(self: &Arc<Self>, id: i64) {
        let _one = self.sweep_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.try_advance(id) {
            tracing::error!("sweep {id}: {e}");
        }
    }

    /// `every_job`: all trials' jobs; else only those of trials the searcher
    /// still waits on (running or paused), which is all a step needs.
    fn load_sweep(&self, id: i64, every_job: bool) -> Result<Loaded, ServiceError> {
        let inner = self.lock();
        let row = inner
            .store
            .sweep(id)?
            .ok_or_else(|| ServiceError::NotFound(format!("sweep {id} does not exist")))?;
        let bad = |what: &str, e: serde_json::Error| {
            ServiceError::Conflict(format!("sweep {id}: its stored {what} is unreadable: {e}"))
        };
        let file: StoredSweep = serde_json::from_str(&row.file).map_err(|e| bad("file", e))?;
        let searcher: Searcher =
            serde_json::from_str(&row.searcher).map_err(|e| bad("searcher", e))?;
        let mut trials = Vec::new();
        for t in inner.store.sweep_trials(id)? {
            let waited_on = searcher
                .trial(t.trial)
                .is_some_and(|s| !s.state.is_terminal());
            if !(every_job || waited_on) {
                continue;
            }
            if let Some(job) = inner.store.job(t.job_id)? {
                trials.push((t, job));
            }
        }
        Ok((row, file, searcher, trials))
    }

    /// The trial's value at its rung: the first point at or past the rung's
    /// step (a trial that trained on past it is ranked where it passed the
    /// rung, not where it stopped), else its last point.
    fn rung_report(&self, job: JobId, metric: &str, rung_step: u64) -> Option<(u64, f64)> {
        let step = i64::try_from(rung_step).unwrap_or(i64::MAX);
        self.with_tracking(|t| t.point_at_or_after(&job.to_string(), metric, step))
            .ok()
            .flatten()
            .map(|p| (p.step.max(0) as u64, p.value))
    }

    /// Feeds the searcher what its trials' jobs did since its last step.
    fn observe(
        &self,
        sweep: i64,
        metric: &str,
        searcher: &mut Searcher,
        trials: &[(TrialRow, Job)],
    ) -> Result<(), SweepError> {
        for (t, job) in trials {
            let Some(state) = searcher.trial(t.trial).map(|s| s.state) else {
                continue;
            };
            let paused = job.state == JobState::Queued
                && job.held_by.as_deref() == Some(pause_hold(sweep).as_str());
            match (state, job.state) {
                (TrialState::Running, JobState::Queued) if paused => {
                    if let Some((step, value)) = self.rung_report(t.job_id, metric, t.max_step) {
                        searcher.on_trial_reported(t.trial, step, value)?;
                    }
                    if searcher.trial(t.trial).map(|s| s.state) == Some(TrialState::Running) {
                        // Paused with nothing logged at its rung: nothing to rank it by.
                        searcher.on_trial_ended(t.trial, TrialEnd::Failed)?;
                    }
                }
                (TrialState::Running, JobState::Succeeded) => {
                    if let Some((step, value)) = self.rung_report(t.job_id, metric, t.max_step) {
                        searcher.on_trial_reported(t.trial, step, value)?;
                    }
                    if searcher.trial(t.trial).map(|s| s.state) == Some(TrialState::Running) {
                        searcher.on_trial_ended(t.trial, TrialEnd::Succeeded)?;
                    }
                }
                (TrialState::Running | TrialState::Paused, JobState::Failed | JobState::Lost) => {
                    searcher.on_trial_ended(t.trial, TrialEnd::Failed)?
                }
                (TrialState::Running | TrialState::Paused, JobState::Cancelled) => {
                    searcher.on_trial_ended(t.trial, TrialEnd::Cancelled)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn try_advance(self: &Arc<Self>, id: i64) -> Result<(), ServiceError> {
        let (row, file, mut searcher, trials) = self.load_sweep(id, false)?;
        if row.state != gpuq_store::sweeps::SWEEP_RUNNING {
            return Ok(());
        }
        self.observe(id, &file.sweep.metric.name, &mut searcher, &trials)?;
        let usage = self.lock().store.sweep_usage(id)?;
        let mut note = None;
        let mut slots = u32::MAX;
        let rate = self.pricing.rate(file.spec.gpus).map(|m| m.0);
        let mut budget_bound = None;
        if let Some(budget) = &file.budget {
            let limit = match budget {
                SweepBudget::GpuHours(h) | SweepBudget::Dollars(h) => *h,
            };
            let used = used_of(&usage, rate.is_some());
            let spent = match budget {
                SweepBudget::GpuHours(_) => used.gpu_hours,
                SweepBudget::Dollars(_) => used.dollars.unwrap_or(0.0),
            };
            let worst = worst_attempt(budget, &file.spec, rate).unwrap_or(f64::INFINITY);
            let open = usage.iter().filter(|u| u.open).count() as f64;
            let fits = attempts_within(limit - spent - open * worst, worst);
            slots = slots.min(fits);
            let unit = |v: f64| match budget {
                SweepBudget::GpuHours(_) => format!("{v:.3} GPU-hours"),
                SweepBudget::Dollars(_) => format!("${v:.2}"),
            };
            budget_bound = Some(format!(
                "budget: {} used and {} attempt(s) under way that may take up to {} each, of {budget}; another attempt could pass it",
                unit(spent),
                open as u32,
                unit(worst)
            ));
        }
        // A queue quota or a job budget refuses trials as it would refuse jobs;
        // the sweep waits rather than fails.
        {
            let (limit, _) = self.config.max_queued(&row.user);
            let queued = self
                .lock()
                .pending
                .values()
                .filter(|p| *p.user == *row.user)
                .count() as u32;
            slots = slots.min(limit.saturating_sub(queued));
            if queued >= limit {
                note = Some(format!(
                    "waiting: {} has {queued} queued jobs, the most allowed ({limit})",
                    row.user
                ));
            }
        }
        if let Err(e) = self.check_budget(&row.user, &file.spec, super::now_ms()) {
            slots = 0;
            note = Some(format!("waiting: {e}"));
        }
        let decisions = searcher.next(slots);
        let by_trial: HashMap<u32, JobId> =
            trials.iter().map(|(t, _)| (t.trial, t.job_id)).collect();
        let mut step = SweepStep::default();
        let mut end = None;
        for d in &decisions {
            match d {
                Decision::Start {
                    trial,
                    params,
                    max_step,
                } => step
                    .start
                    .push(self.trial_job(&row, &file, *trial, params, *max_step)),
                Decision::Promote { trial, max_step } => {
                    if let Some(job) = by_trial.get(trial) {
                        step.promote.push((*job, *max_step));
                    }
                }
                Decision::Stop { trial } => {
                    if let Some(job) = by_trial.get(trial) {
                        step.stop.push((*job, stop_reason(id, &searcher, *trial)));
                    }
                }
                Decision::Done => end = Some(("done".to_string(), done_reason(&searcher, &file))),
            }
        }
        let running = searcher
            .trials()
            .iter()
            .any(|t| t.state == TrialState::Running);
        if end.is_none() && slots == 0 && decisions.is_empty() {
            if let Some(why) = budget_bound.filter(|_| {
                // Only the budget blocks it: nothing runs that could free room.
                !running
            }) {
                for d in searcher.finish() {
                    if let Decision::Stop { trial } = d {
                        if let Some(job) = by_trial.get(&trial) {
                            step.stop
                                .push((*job, format!("sweep {id} stopped at its budget")));
                        }
                    }
                }
                end = Some(("budget".to_string(), format!("stopped at its {why}")));
            } else if note.is_none() && file.budget.is_some() {
                note = Some("budget: no new trial or promotion until the running ones end".into());
            }
        }
        step.searcher = serde_json::to_string(&searcher).expect("searcher serializes");
        step.end = end;
        step.note = note;
        let unchanged = step.searcher == row.searcher
            && step.end.is_none()
            && step.note == row.reason
            && step.start.is_empty();
        if unchanged {
            return Ok(());
        }
        self.commit_step(id, &step)
    }

    fn trial_job(
        &self,
        row: &SweepRow,
        file: &StoredSweep,
        trial: u32,
        params: &BTreeMap<String, serde_json::Value>,
        max_step: u64,
    ) -> NewTrial {
        let mut spec = file.spec.clone();
        spec.name = Some(format!("{}-t{trial}", row.name));
        spec.params.extend(params.clone());
        NewTrial {
            trial,
            job: NewJob {
                spec,
                user: row.user.clone(),
                cwd: file.cwd.clone(),
                env: file.env.clone(),
                idempotency_key: None,
                repro: file.repro.clone(),
            },
            max_step,
        }
    }

    /// Commits a step and brings the in-memory queue in line with it.
    fn commit_step(self: &Arc<Self>, id: i64, step: &SweepStep) -> Result<(), ServiceError> {
        let now = super::now_ms();
        {
            let mut inner = self.lock();
            let jobs = inner.store.apply_sweep_step(id, step, now)?;
            for job in &jobs {
                self.enqueue(&mut inner, job);
                inner.states.insert(job.id, JobState::Queued);
            }
            for (job, _) in &step.promote {
                if let Some(p) = inner.pending.values_mut().find(|p| p.id == *job) {
                    p.held = false;
                }
            }
            for (job, _) in &step.stop {
                if inner.states.get(job) == Some(&JobState::Queued) {
                    Self::remove_pending(&mut inner, *job);
                    inner.states.insert(*job, JobState::Cancelled);
                }
            }
        }
        self.changed_and_reschedule();
        Ok(())
    }

    /// What a trial's attempt sees besides an ordinary job's environment
    /// (GPUQ_TRIAL_TOKEN: this job's token, for asking at its rung).
    pub(super) fn add_sweep_env(&self, job: JobId, env: &mut BTreeMap<String, String>) {
        let Ok(Some(t)) = self.lock().store.trial_of_job(job) else {
            return;
        };
        env.insert("GPUQ_SWEEP_ID".into(), t.sweep_id.to_string());
        env.insert("GPUQ_TRIAL_ID".into(), t.trial.to_string());
        env.insert("GPUQ_TRIAL_MAX_STEP".into(), t.max_step.to_string());
        env.insert("GPUQ_TRIAL_TOKEN".into(), self.link.job_token(job));
    }

    /// A running trial logged its rung's step and asks whether to train on.
    /// It does when the searcher, given its result, would hand the slot it
    /// frees straight back to it (ASHA's rule, asynchronous as always): then
    /// it is promoted in its own attempt, with no checkpoint round trip and no
    /// process start. Otherwise nothing is committed and it pauses as usual.
    /// The continuation stays within the attempt's time limit, so a budget's
    /// worst case already covers it.
    pub fn trial_at_rung(
        self: &Arc<Self>,
        job: JobId,
        caller: &Caller,
    ) -> Result<RungAnswer, ServiceError> {
        let owner = self.job(job)?;
        if !(caller.admin || caller.user == owner.user) {
            return Err(ServiceError::Forbidden(format!(
                "job {job} belongs to {}; only it, its owner or an admin may report its rung",
                owner.user
            )));
        }
        let trial = self
            .lock()
            .store
            .trial_of_job(job)?
            .ok_or_else(|| ServiceError::Conflict(format!("job {job} is not a sweep trial")))?;
        let pause = |reason: String| RungAnswer {
            train_on: false,
            max_step: trial.max_step,
            reason,
        };
        if owner.state != JobState::Running {
            return Ok(pause(format!("job {job} is {}, not running", owner.state)));
        }
        // What it logged through its metrics file, before it is ranked.
        self.ingest_metrics_file(job, &owner.user, false);
        let _one = self.sweep_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (row, file, mut searcher, _) = self.load_sweep(trial.sweep_id, false)?;
        if row.state != gpuq_store::sweeps::SWEEP_RUNNING {
            return Ok(pause(format!("sweep {} has ended ({})", row.id, row.state)));
        }
        if trial.max_step >= file.sweep.searcher.max_step {
            return Ok(pause(format!(
                "step {} is the last: the trial is complete",
                trial.max_step
            )));
        }
        let running = searcher
            .trial(trial.trial)
            .is_some_and(|t| t.state == TrialState::Running);
        if !running || searcher.rung_step(trial.trial) != Some(trial.max_step) {
            return Ok(pause(
                "the sweep does not wait on this trial at this step".into(),
            ));
        }
        let metric = &file.sweep.metric.name;
        let Some((step, value)) = self
            .rung_report(job, metric, trial.max_step)
            .filter(|r| r.0 >= trial.max_step)
        else {
            return Ok(pause(format!(
                "no {metric} at step {} or later yet",
                trial.max_step
            )));
        };
        match searcher.train_on_at_rung(trial.trial, step, value)? {
            Some(max_step) => {
                let step = SweepStep {
                    searcher: serde_json::to_string(&searcher).expect("searcher serializes"),
                    train_on: vec![(job, max_step)],
                    note: row.reason.clone(),
                    ..SweepStep::default()
                };
                self.commit_step(row.id, &step)?;
                Ok(RungAnswer {
                    train_on: true,
                    max_step,
                    reason: format!(
                        "promoted at its rung ({metric} = {value} at step {step}): trains on to step {max_step}",
                        step = trial.max_step
                    ),
                })
            }
            None => Ok(pause(format!(
                "not promoted at once ({metric} = {value} at step {step}); it pauses and waits"
            ))),
        }
    }

    /// When a trial's attempt ends well having logged its metric at or past
    /// its rung's step (below the top rung), its job pauses: back in the
    /// queue, held by the sweep. Returns the hold and why.
    pub(super) fn trial_pause(&self, trial: TrialRow) -> Option<(String, String)> {
        let job = trial.job_id;
        let (metric, top) = {
            let inner = self.lock();
            let row = inner.store.sweep(trial.sweep_id).ok()??;
            if row.state != gpuq_store::sweeps::SWEEP_RUNNING {
                return None;
            }
            let file: StoredSweep = serde_json::from_str(&row.file).ok()?;
            (file.sweep.metric.name, file.sweep.searcher.max_step)
        };
        if trial.max_step >= top {
            return None;
        }
        let (step, _) = self.rung_report(job, &metric, trial.max_step)?;
        (step >= trial.max_step).then(|| {
            (
                pause_hold(trial.sweep_id),
                format!(
                    "paused by sweep {} at step {step}, its rung; resumes from its checkpoint if promoted",
                    trial.sweep_id
                ),
            )
        })
    }

    /// Stops a sweep: no more trials; queued and paused ones are cancelled,
    /// running ones stopped as a cancel stops a job.
    pub fn cancel_sweep(
        self: &Arc<Self>,
        id: i64,
        caller: &Caller,
    ) -> Result<SweepDetail, ServiceError> {
        let _one = self.sweep_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (row, _file, mut searcher, trials) = self.load_sweep(id, true)?;
        if !(caller.admin || caller.user == row.user) {
            return Err(ServiceError::Forbidden(format!(
                "sweep {id} belongs to {}; only its owner or an admin may cancel it, and you are {}",
                row.user, caller.user
            )));
        }
        if row.state != gpuq_store::sweeps::SWEEP_RUNNING {
            return Err(ServiceError::Conflict(format!(
                "sweep {id} already ended ({}); nothing to cancel",
                row.state
            )));
        }
        searcher.finish();
        let why = format!("sweep {id} cancelled by {}", caller.user);
        let mut step = SweepStep {
            searcher: serde_json::to_string(&searcher).expect("searcher serializes"),
            end: Some(("cancelled".into(), format!("cancelled by {}", caller.user))),
            ..SweepStep::default()
        };
        let mut running = Vec::new();
        for (t, job) in &trials {
            match job.state {
                JobState::Queued | JobState::Preempted => step.stop.push((t.job_id, why.clone())),
                JobState::Running => running.push(t.job_id),
                _ => {}
            }
        }
        self.commit_step(id, &step)?;
        drop(_one);
        for job in running {
            if let Err(e) = self.cancel(job, &caller.user) {
                tracing::warn!("sweep {id}: cannot stop trial job {job}: {e}");
            }
        }
        self.sweep_detail(id)
    }

    pub fn sweep_list(&self) -> Result<Vec<SweepSummary>, ServiceError> {
        let rows = self.lock().store.sweeps()?;
        let mut out = Vec::new();
        for row in rows {
            out.push(self.sweep_detail(row.id)?.summary);
        }
        Ok(out)
    }

    pub fn sweep_detail(&self, id: i64) -> Result<SweepDetail, ServiceError> {
        let (row, file, searcher, trials) = self.load_sweep(id, true)?;
        let usage = self.lock().store.sweep_usage(id)?;
        let priced = self.pricing.rate(file.spec.gpus).is_some();
        let now = super::now_ms();
        let usage_of: HashMap<JobId, &TrialUsage> = usage.iter().map(|u| (u.job_id, u)).collect();
        let mut infos = Vec::new();
        for (t, job) in &trials {
            let searched = searcher.trial(t.trial);
            let u = usage_of.get(&t.job_id);
            let live_ms = match (job.state, job.started_at) {
                (JobState::Running, Some(s)) => {
                    (now - s).max(0) * i64::from(job.gpus_requested.max(1))
                }
                _ => 0,
            };
            let last = self
                .with_tracking(|tr| tr.job_run(t.job_id))
                .ok()
                .flatten()
                .and_then(|r| r.metrics.get(&file.sweep.metric.name).cloned())
                .map(|p| (p.step.max(0) as u64, p.value, Some(p.time)))
                .or(searched.and_then(|s| s.last.map(|(step, value)| (step, value, None))));
            infos.push(TrialInfo {
                trial: t.trial,
                job: t.job_id,
                params: searched.map(|s| s.params.clone()).unwrap_or_default(),
                state: trial_state(job, searched.map(|s| s.state), id).to_string(),
                rung: searched.map(|s| s.rung).unwrap_or(0),
                rung_step: t.max_step,
                last_step: last.map(|l| l.0),
                last_value: last.map(|l| MetricValue(l.1)),
                last_at: last.and_then(|l| l.2),
                attempts: u.map(|u| u.attempts).unwrap_or(0),
                gpu_hours: (u.map(|u| u.gpu_ms).unwrap_or(0) + live_ms) as f64 / MS_PER_HOUR,
                cost: priced.then(|| u.map(|u| u.cost_micros).unwrap_or(0) as f64 / 1e6),
                reason: job.reason.clone(),
            });
        }
        sort_best_first(&mut infos, file.sweep.metric.goal);
        let best = searcher.best().and_then(|(trial, step, value)| {
            Some(BestTrial {
                trial,
                job: *trials
                    .iter()
                    .find(|(t, _)| t.trial == trial)
                    .map(|(t, _)| &t.job_id)?,
                step,
                value: MetricValue(value),
            })
        });
        let active = infos
            .iter()
            .filter(|t| matches!(t.state.as_str(), "queued" | "running"))
            .count() as u32;
        let experiment_id = self
            .with_tracking(|tr| tr.run(&row.run_id))
            .ok()
            .flatten()
            .map(|r| r.experiment_id)
            .unwrap_or(0);
        Ok(SweepDetail {
            summary: SweepSummary {
                id,
                name: row.name.clone(),
                user: row.user.clone(),
                project: row.project.clone(),
                state: row.state.clone(),
                reason: row.reason.clone(),
                searcher: file.sweep.searcher.name,
                metric: file.sweep.metric.clone(),
                created_at: row.created_at,
                ended_at: row.ended_at,
                trial_count: infos.len() as u32,
                active,
                max_trials: file.sweep.searcher.max_trials,
                best,
                budget: file.budget,
                used: used_of(&usage, priced),
            },
            seed: row.seed,
            rungs: searcher.rungs().to_vec(),
            max_concurrent: file.sweep.searcher.max_concurrent,
            run_id: row.run_id,
            experiment_id,
            trials: infos,
        })
    }
}

/// The furthest-trained first, then by the goal; trials with no value last.
fn sort_best_first(trials: &mut [TrialInfo], goal: Goal) {
    trials.sort_by(|a, b| {
        let key = |t: &TrialInfo| t.last_value.map(|v| v.0).filter(|v| !v.is_nan());
        match (key(a), key(b)) {
            (None, None) => a.trial.cmp(&b.trial),
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(_), None) => std::cmp::Ordering::Less,
            (Some(x), Some(y)) => b
                .last_step
                .cmp(&a.last_step)
                .then(match goal {
                    Goal::Minimize => x.total_cmp(&y),
                    Goal::Maximize => y.total_cmp(&x),
                })
                .then(a.trial.cmp(&b.trial)),
        }
    });
}

fn stop_reason(sweep: i64, searcher: &Searcher, trial: u32) -> String {
    let Some(t) = searcher.trial(trial) else {
        return format!("stopped by sweep {sweep}");
    };
    let step = searcher.rungs()[t.rung.min(searcher.rungs().len() - 1)];
    match searcher.rank_at(trial, t.rung) {
        Some((rank, of)) => format!(
            "stopped early by sweep {sweep} at step {step}: ranked {rank} of {of} there; only the top 1/{} go on",
            searcher.eta()
        ),
        None => format!("stopped by sweep {sweep} at step {step}"),
    }
}

fn done_reason(searcher: &Searcher, file: &StoredSweep) -> String {
    let n = searcher.trials().len();
    match searcher.best() {
        Some((trial, step, value)) => format!(
            "searched {n} trials; best: trial {trial}, {}={value} at step {step}",
            file.sweep.metric.name
        ),
        None => format!(
            "searched {n} trials; none reported {}",
            file.sweep.metric.name
        ),
    }
}
