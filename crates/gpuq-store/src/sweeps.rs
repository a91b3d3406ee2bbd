//! Sweeps: the sweep row (its file, seed and the searcher's state), the trials
//! that link it to ordinary jobs, and one transaction per searcher step.
//!
//! Each step commits the searcher's new state together with everything its
//! decisions change (new trial jobs, promotions, stops, the sweep's end), so
//! a daemon killed at any moment restarts from a state where every trial the
//! searcher knows of exists as a job, and no job exists it does not know of.

use crate::{end_queued_in, insert_event, insert_job, tracking, NewJob, Result, Store, StoreError};
use gpuq_core::{Job, JobId, JobState, Millis};
use rusqlite::{params, OptionalExtension, Row, Transaction};

/// A sweep's states: `running` until the searcher is done (`done`), a user
/// cancels it (`cancelled`) or its budget admits no further attempt (`budget`).
pub const SWEEP_RUNNING: &str = "running";

#[derive(Debug, Clone, PartialEq)]
pub struct SweepRow {
    pub id: i64,
    pub name: String,
    pub user: String,
    pub project: Option<String>,
    pub state: String,
    /// Why it ended, or what holds it back while running (its budget).
    pub reason: Option<String>,
    pub created_at: Millis,
    pub ended_at: Option<Millis>,
    /// The sweep request as JSON (the trials' job spec and the search).
    pub file: String,
    pub seed: u64,
    /// The searcher's state as JSON.
    pub searcher: String,
    /// Its parent run in the tracking API.
    pub run_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialRow {
    pub sweep_id: i64,
    pub trial: u32,
    pub job_id: JobId,
    /// The step the trial's next (or current) attempt may train to.
    pub max_step: u64,
}

/// What one trial's job has used: finished attempts' GPU time and cost, and
/// whether an attempt is running or queued (that could still use a worst case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialUsage {
    pub job_id: JobId,
    pub gpu_ms: i64,
    pub cost_micros: i64,
    pub attempts: u32,
    pub open: bool,
}

pub struct NewSweep<'a> {
    pub name: &'a str,
    pub user: &'a str,
    pub project: Option<&'a str>,
    pub file: &'a str,
    pub seed: u64,
    pub searcher: &'a str,
}

/// A new trial: its job, and the step its first attempt trains to.
pub struct NewTrial {
    pub trial: u32,
    pub job: NewJob,
    pub max_step: u64,
}

/// Everything one searcher step changes, committed at once.
#[derive(Default)]
pub struct SweepStep {
    /// The searcher's state after the step.
    pub searcher: String,
    pub start: Vec<NewTrial>,
    /// Paused trials to resume: (job, the step they may now train to).
    pub promote: Vec<(JobId, u64)>,
    /// A running trial at its rung promoted at once: it trains on in its
    /// attempt to this step, never paused.
    pub train_on: Vec<(JobId, u64)>,
    /// Paused trials never to resume: (job, why).
    pub stop: Vec<(JobId, String)>,
    /// The sweep ends: (state, why).
    pub end: Option<(String, String)>,
    /// While running: what holds it back (None clears it).
    pub note: Option<String>,
}

const SWEEP_COLUMNS: &str =
    "id, name, user, project, state, reason, created_at, ended_at, file, seed, searcher, run_id";

fn read_sweep(r: &Row<'_>) -> rusqlite::Result<SweepRow> {
    let id: i64 = r.get(0)?;
    Ok(SweepRow {
        id,
        name: r.get(1)?,
        user: r.get(2)?,
        project: r.get(3)?,
        state: r.get(4)?,
        reason: r.get(5)?,
        created_at: r.get(6)?,
        ended_at: r.get(7)?,
        file: r.get(8)?,
        seed: r.get::<_, i64>(9)? as u64,
        searcher: r.get(10)?,
        run_id: r
            .get::<_, Option<String>>(11)?
            .unwrap_or_else(|| parent_run_id(id)),
    })
}

fn read_trial(r: &Row<'_>) -> rusqlite::Result<TrialRow> {
    Ok(TrialRow {
        sweep_id: r.get(0)?,
        trial: r.get(1)?,
        job_id: r.get(2)?,
        max_step: r.get::<_, i64>(3)? as u64,
    })
}

/// The parent run's id in the tracking API.
pub fn parent_run_id(sweep: i64) -> String {
    format!("sweep-{sweep}")
}

/// The hold a paused trial's job carries; only the sweep releases it.
pub fn pause_hold(sweep: i64) -> String {
    format!("sweep {sweep}")
}

impl Store {
    /// A new running sweep, with its experiment (named after it, shared by
    /// sweeps of that name) and its parent run.
    pub fn create_sweep(&mut self, new: &NewSweep<'_>, now: Millis) -> Result<i64> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO sweeps (name, user, project, state, created_at, file, seed, searcher) \
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7)",
                params![
                    new.name,
                    new.user,
                    new.project,
                    now,
                    new.file,
                    new.seed as i64,
                    new.searcher
                ],
            )?;
            let id = tx.last_insert_rowid();
            let run = parent_run_id(id);
            tx.execute(
                "UPDATE sweeps SET run_id = ?2 WHERE id = ?1",
                params![id, run],
            )?;
            let experiment = tracking::experiment_named(tx, new.name, now)?;
            tracking::insert_parent_run(tx, &run, experiment, new.name, new.user, id, now)?;
            Ok(id)
        })
    }

    pub fn sweep(&self, id: i64) -> Result<Option<SweepRow>> {
        let sql = format!("SELECT {SWEEP_COLUMNS} FROM sweeps WHERE id = ?1");
        Ok(self.conn.query_row(&sql, [id], read_sweep).optional()?)
    }

    /// Every sweep, newest first.
    pub fn sweeps(&self) -> Result<Vec<SweepRow>> {
        let sql = format!("SELECT {SWEEP_COLUMNS} FROM sweeps ORDER BY id DESC");
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([], read_sweep)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn running_sweeps(&self) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM sweeps WHERE state = 'running' ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn sweep_trials(&self, sweep: i64) -> Result<Vec<TrialRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT sweep_id, trial, job_id, max_step FROM trials WHERE sweep_id = ?1 ORDER BY trial",
        )?;
        let rows = stmt.query_map([sweep], read_trial)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The trial a job is, if it is one.
    pub fn trial_of_job(&self, job: JobId) -> Result<Option<TrialRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT sweep_id, trial, job_id, max_step FROM trials WHERE job_id = ?1",
                [job],
                read_trial,
            )
            .optional()?)
    }

    /// Per trial job: finished attempts' GPU time and cost, and whether it
    /// has an attempt to come or under way.
    pub fn sweep_usage(&self, sweep: i64) -> Result<Vec<TrialUsage>> {
        let mut stmt = self.conn.prepare(
            "SELECT t.job_id, j.state, j.gpus_requested, j.cost_micros, \
                    COALESCE(SUM(CASE WHEN a.ended_at IS NOT NULL THEN a.ended_at - a.started_at END), 0), \
                    COUNT(a.attempt), j.held_by \
             FROM trials t JOIN jobs j ON j.id = t.job_id \
             LEFT JOIN attempts a ON a.job_id = t.job_id \
             WHERE t.sweep_id = ?1 GROUP BY t.job_id ORDER BY t.trial",
        )?;
        let rows = stmt.query_map([sweep], |r| {
            let state: String = r.get(1)?;
            let gpus: i64 = r.get(2)?;
            let held: Option<String> = r.get(6)?;
            let open = match state.as_str() {
                "running" | "preempted" => true,
                "queued" => held.is_none(),
                _ => false,
            };
            Ok(TrialUsage {
                job_id: r.get(0)?,
                gpu_ms: r.get::<_, i64>(4)? * gpus.max(1),
                cost_micros: r.get::<_, Option<i64>>(3)?.unwrap_or(0),
                attempts: r.get::<_, i64>(5)? as u32,
                open,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Commits one searcher step; returns the new trials' jobs. A sweep that
    /// is no longer running takes no step (a late call after a cancel).
    pub fn apply_sweep_step(
        &mut self,
        sweep: i64,
        step: &SweepStep,
        now: Millis,
    ) -> Result<Vec<Job>> {
        let ids = self.write(|tx| {
            let state: Option<String> = tx
                .query_row("SELECT state FROM sweeps WHERE id = ?1", [sweep], |r| {
                    r.get(0)
                })
                .optional()?;
            if state.as_deref() != Some(SWEEP_RUNNING) {
                return Ok(Vec::new());
            }
            apply_in(tx, sweep, step, now)
        })?;
        ids.into_iter()
            .map(|id| {
                self.job(id)?.ok_or(StoreError::Corrupt {
                    id,
                    why: "vanished after insert".into(),
                })
            })
            .collect()
    }
}

fn apply_in(
    tx: &Transaction<'_>,
    sweep: i64,
    step: &SweepStep,
    now: Millis,
) -> rusqlite::Result<Vec<JobId>> {
    tx.execute(
        "UPDATE sweeps SET searcher = ?2 WHERE id = ?1",
        params![sweep, step.searcher],
    )?;
    let run = parent_run_id(sweep);
    let experiment: i64 = tx.query_row(
        "SELECT experiment_id FROM runs WHERE id = ?1",
        [&run],
        |r| r.get(0),
    )?;
    let mut ids = Vec::new();
    for t in &step.start {
        let id = insert_job(tx, &t.job, now)?;
        tx.execute(
            "INSERT INTO trials (sweep_id, trial, job_id, max_step) VALUES (?1, ?2, ?3, ?4)",
            params![sweep, t.trial, id, t.max_step as i64],
        )?;
        tracking::make_child_run(tx, id, experiment, &run, sweep, t.trial)?;
        insert_event(
            tx,
            now,
            id,
            "trial",
            &format!(
                "sweep {sweep} trial {}: trains to step {}",
                t.trial, t.max_step
            ),
        )?;
        ids.push(id);
    }
    for (job, max_step) in &step.promote {
        tx.execute(
            "UPDATE trials SET max_step = ?2 WHERE job_id = ?1",
            params![job, *max_step as i64],
        )?;
        tx.execute(
            "UPDATE jobs SET held_by = NULL, reason = NULL WHERE id = ?1 AND state = 'queued'",
            [job],
        )?;
        insert_event(
            tx,
            now,
            *job,
            "promoted",
            &format!("by sweep {sweep}: resumes and trains to step {max_step}"),
        )?;
    }
    for (job, max_step) in &step.train_on {
        tx.execute(
            "UPDATE trials SET max_step = ?2 WHERE job_id = ?1",
            params![job, *max_step as i64],
        )?;
        insert_event(
            tx,
            now,
            *job,
            "promoted",
            &format!(
                "by sweep {sweep} at its rung: trains on to step {max_step} without a restart"
            ),
        )?;
    }
    let stops: Vec<(JobId, JobState, String)> = step
        .stop
        .iter()
        .map(|(job, why)| (*job, JobState::Cancelled, why.clone()))
        .collect();
    end_queued_in(tx, &stops, now)?;
    match &step.end {
        Some((state, reason)) => {
            tx.execute(
                "UPDATE sweeps SET state = ?2, reason = ?3, ended_at = ?4 WHERE id = ?1",
                params![sweep, state, reason, now],
            )?;
            let status = if state == "cancelled" {
                "KILLED"
            } else {
                "FINISHED"
            };
            tx.execute(
                "UPDATE runs SET status = ?2, end_time = ?3 WHERE id = ?1",
                params![run, status, now],
            )?;
        }
        None => {
            tx.execute(
                "UPDATE sweeps SET reason = ?2 WHERE id = ?1",
                params![sweep, step.note],
            )?;
        }
    }
    Ok(ids)
}
