//! Experiment tracking: experiments, runs, params, tags and metric histories,
//! in the same database as the jobs but on a connection of its own, so heavy
//! metric logging never waits on (or holds) the scheduler's lock.
//!
//! Every job is a run: its row is written with the job (`Store::submit`), its id
//! is the job's number, and its status and times are the job's, read through a
//! join. Runs made through the MLflow API get random hex ids and keep the status
//! their client sets.
//!
//! A metric is a series of points (step, time, value) in logged order, with a
//! rollup per [`ROLLUP_POINTS`] points kept as they arrive, so a chart of a long
//! history reads the rollups, not every point.

use crate::schema;
use crate::{Result, StoreError};
use gpuq_core::tracking::downsample::{self, Point, Rollup, ROLLUP_POINTS};
use gpuq_core::{JobId, JobState, Millis};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// MLflow's limits per log-batch request.
pub const MAX_BATCH_METRICS: usize = 1000;
pub const MAX_BATCH_PARAMS: usize = 100;
pub const MAX_BATCH_TAGS: usize = 100;
/// MLflow's limits on names and values.
pub const MAX_KEY_LEN: usize = 250;
pub const MAX_PARAM_VALUE_LEN: usize = 6000;
pub const MAX_TAG_VALUE_LEN: usize = 8000;
pub const MAX_EXPERIMENT_NAME_LEN: usize = 500;

/// Why a tracking request is refused; each maps to one MLflow error code.
#[derive(Debug, thiserror::Error)]
pub enum TrackingError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for TrackingError {
    fn from(e: rusqlite::Error) -> Self {
        TrackingError::Store(StoreError::from_sqlite(e))
    }
}

pub type TrackingResult<T> = std::result::Result<T, TrackingError>;

#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    pub artifact_location: String,
    pub lifecycle_stage: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Who made it through the API (None: Default, or a project's).
    pub owner: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// A run with what its readers need: params, tags and each metric's latest point.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub experiment_id: i64,
    pub job: Option<JobId>,
    pub name: Option<String>,
    pub user: String,
    /// MLflow's status: for a job's run, the job's state in MLflow's words.
    pub status: String,
    pub start_time: Option<Millis>,
    pub end_time: Option<Millis>,
    pub lifecycle_stage: String,
    pub params: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub metrics: BTreeMap<String, Point>,
}

impl RunRow {
    /// Where the MLflow client puts and finds this run's artifacts.
    pub fn artifact_uri(&self) -> String {
        format!("mlflow-artifacts:/runs/{}", self.id)
    }
}

/// One metric point as a client logs it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricIn {
    pub key: String,
    pub value: f64,
    pub time: Millis,
    /// `None`: the next step of this metric (its count so far), for a metrics
    /// file line without a step.
    pub step: Option<i64>,
}

/// What a log-batch request carries.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub metrics: Vec<MetricIn>,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
}

/// A new run made through the API.
pub struct NewRun<'a> {
    pub id: &'a str,
    pub experiment_id: i64,
    pub name: Option<&'a str>,
    pub user: &'a str,
    pub start_time: Millis,
    pub tags: &'a [(String, String)],
}

/// What may change on a run (MLflow's runs/update).
#[derive(Debug, Default)]
pub struct RunUpdate<'a> {
    pub status: Option<&'a str>,
    pub end_time: Option<Millis>,
    pub name: Option<&'a str>,
}

pub struct Tracking {
    conn: Connection,
}

/// MLflow's word for a job state.
pub fn run_status(state: JobState) -> &'static str {
    match state {
        JobState::Queued | JobState::Preempted => "SCHEDULED",
        JobState::Running => "RUNNING",
        JobState::Succeeded => "FINISHED",
        JobState::Failed | JobState::Lost => "FAILED",
        JobState::Cancelled => "KILLED",
    }
}

pub const RUN_STATUSES: &[&str] = &["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"];

/// Columns of a run; a job's run takes status and times from the job.
const RUN_SELECT: &str = "SELECT r.id, r.experiment_id, r.job_id, \
     COALESCE((SELECT value FROM run_tags t WHERE t.run_id = r.id AND t.key = 'mlflow.runName'), r.name), \
     r.user, r.status, j.state, \
     CASE WHEN r.job_id IS NULL THEN r.start_time \
          ELSE COALESCE((SELECT MIN(a.started_at) FROM attempts a WHERE a.job_id = r.job_id), j.submitted_at) END, \
     CASE WHEN r.job_id IS NULL THEN r.end_time ELSE j.ended_at END, \
     r.lifecycle_stage \
     FROM runs r LEFT JOIN jobs j ON j.id = r.job_id";

impl Tracking {
    /// Opens the tracking connection on a database `Store::open` has migrated.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path).map_err(StoreError::from_sqlite)?;
        schema::configure(&conn)?;
        Ok(Self { conn })
    }

    fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> TrackingResult<T>,
    ) -> TrackingResult<T> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    // ---- experiments ----

    pub fn create_experiment(
        &mut self,
        name: &str,
        owner: Option<&str>,
        tags: &[(String, String)],
        now: Millis,
    ) -> TrackingResult<i64> {
        check_experiment_name(name)?;
        for (k, v) in tags {
            check_tag(k, v)?;
        }
        self.write(|tx| {
            let exists: Option<String> = tx
                .query_row(
                    "SELECT lifecycle_stage FROM experiments WHERE name = ?1",
                    [name],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(stage) = exists {
                let hint = if stage == "deleted" {
                    " (it is deleted: restore it, or choose another name)"
                } else {
                    ""
                };
                return Err(TrackingError::AlreadyExists(format!(
                    "Experiment '{name}' already exists{hint}."
                )));
            }
            let id = insert_experiment(tx, name, now)?;
            tx.execute(
                "UPDATE experiments SET owner = ?1 WHERE id = ?2",
                params![owner, id],
            )?;
            for (k, v) in tags {
                tx.execute(
                    "INSERT OR REPLACE INTO experiment_tags (experiment_id, key, value) VALUES (?1, ?2, ?3)",
                    params![id, k, v],
                )?;
            }
            Ok(id)
        })
    }

    pub fn experiment(&self, id: i64) -> TrackingResult<Option<ExperimentRow>> {
        self.experiment_where("id = ?1", rusqlite::types::Value::Integer(id))
    }

    pub fn experiment_by_name(&self, name: &str) -> TrackingResult<Option<ExperimentRow>> {
        self.experiment_where("name = ?1", rusqlite::types::Value::Text(name.into()))
    }

    fn experiment_where(
        &self,
        clause: &str,
        arg: rusqlite::types::Value,
    ) -> TrackingResult<Option<ExperimentRow>> {
        let sql = format!(
            "SELECT id, name, artifact_location, lifecycle_stage, created_at, updated_at, owner FROM experiments WHERE {clause}"
        );
        let row = self
            .conn
            .query_row(&sql, [arg], read_experiment)
            .optional()?;
        let Some(mut e) = row else { return Ok(None) };
        e.tags = self.experiment_tags(e.id)?;
        Ok(Some(e))
    }

    fn experiment_tags(&self, id: i64) -> TrackingResult<BTreeMap<String, String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, value FROM experiment_tags WHERE experiment_id = ?1")?;
        let rows = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn experiments(&self) -> TrackingResult<Vec<ExperimentRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, name, artifact_location, lifecycle_stage, created_at, updated_at, owner FROM experiments",
        )?;
        let mut all: Vec<ExperimentRow> = stmt
            .query_map([], read_experiment)?
            .collect::<rusqlite::Result<_>>()?;
        let mut tags: HashMap<i64, BTreeMap<String, String>> = HashMap::new();
        let mut stmt = self
            .conn
            .prepare("SELECT experiment_id, key, value FROM experiment_tags")?;
        for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))? {
            let (id, k, v): (i64, String, String) = row?;
            tags.entry(id).or_default().insert(k, v);
        }
        for e in &mut all {
            e.tags = tags.remove(&e.id).unwrap_or_default();
        }
        Ok(all)
    }

    /// Renames, deletes (`lifecycle = "deleted"`) or restores an experiment.
    pub fn update_experiment(
        &mut self,
        id: i64,
        new_name: Option<&str>,
        lifecycle: Option<&str>,
        now: Millis,
    ) -> TrackingResult<()> {
        if let Some(name) = new_name {
            check_experiment_name(name)?;
        }
        self.write(|tx| {
            let stage: Option<String> = tx
                .query_row(
                    "SELECT lifecycle_stage FROM experiments WHERE id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .optional()?;
            if stage.is_none() {
                return Err(no_experiment(id));
            }
            if id == 0 && lifecycle == Some("deleted") {
                return Err(TrackingError::Invalid(
                    "Cannot delete the default experiment '0'.".into(),
                ));
            }
            if let Some(name) = new_name {
                let taken: Option<i64> = tx
                    .query_row(
                        "SELECT id FROM experiments WHERE name = ?1 AND id != ?2",
                        params![name, id],
                        |r| r.get(0),
                    )
                    .optional()?;
                if taken.is_some() {
                    return Err(TrackingError::AlreadyExists(format!(
                        "Experiment '{name}' already exists."
                    )));
                }
                tx.execute(
                    "UPDATE experiments SET name = ?1, updated_at = ?2 WHERE id = ?3",
                    params![name, now, id],
                )?;
            }
            if let Some(stage) = lifecycle {
                tx.execute(
                    "UPDATE experiments SET lifecycle_stage = ?1, updated_at = ?2 WHERE id = ?3",
                    params![stage, now, id],
                )?;
            }
            Ok(())
        })
    }

    pub fn set_experiment_tag(
        &mut self,
        id: i64,
        key: &str,
        value: Option<&str>,
        now: Millis,
    ) -> TrackingResult<()> {
        if let Some(v) = value {
            check_tag(key, v)?;
        }
        self.write(|tx| {
            let found: Option<i64> = tx
                .query_row("SELECT id FROM experiments WHERE id = ?1", [id], |r| r.get(0))
                .optional()?;
            if found.is_none() {
                return Err(no_experiment(id));
            }
            match value {
                Some(v) => tx.execute(
                    "INSERT OR REPLACE INTO experiment_tags (experiment_id, key, value) VALUES (?1, ?2, ?3)",
                    params![id, key, v],
                )?,
                None => tx.execute(
                    "DELETE FROM experiment_tags WHERE experiment_id = ?1 AND key = ?2",
                    params![id, key],
                )?,
            };
            tx.execute(
                "UPDATE experiments SET updated_at = ?1 WHERE id = ?2",
                params![now, id],
            )?;
            Ok(())
        })
    }

    // ---- runs ----

    pub fn create_run(&mut self, run: &NewRun<'_>) -> TrackingResult<()> {
        for (k, v) in run.tags {
            check_tag(k, v)?;
        }
        self.write(|tx| {
            let stage: Option<String> = tx
                .query_row(
                    "SELECT lifecycle_stage FROM experiments WHERE id = ?1",
                    [run.experiment_id],
                    |r| r.get(0),
                )
                .optional()?;
            match stage.as_deref() {
                None => return Err(no_experiment(run.experiment_id)),
                Some("deleted") => {
                    return Err(TrackingError::Invalid(format!(
                    "The experiment {} must be in the 'active' state. Current state is deleted.",
                    run.experiment_id
                )))
                }
                Some(_) => {}
            }
            tx.execute(
                "INSERT INTO runs (id, experiment_id, name, user, status, start_time, created_at) \
                 VALUES (?1, ?2, ?3, ?4, 'RUNNING', ?5, ?5)",
                params![
                    run.id,
                    run.experiment_id,
                    run.name,
                    run.user,
                    run.start_time
                ],
            )?;
            for (k, v) in run.tags {
                put_tag(tx, run.id, k, v)?;
            }
            if let Some(name) = run.name {
                put_tag(tx, run.id, "mlflow.runName", name)?;
            }
            put_tag(tx, run.id, "mlflow.user", run.user)?;
            Ok(())
        })
    }

    pub fn run(&self, id: &str) -> TrackingResult<Option<RunRow>> {
        let sql = format!("{RUN_SELECT} WHERE r.id = ?1");
        let row = self.conn.query_row(&sql, [id], read_run).optional()?;
        let Some(mut run) = row.transpose()? else {
            return Ok(None);
        };
        self.fill(std::slice::from_mut(&mut run))?;
        Ok(Some(run))
    }

    /// The run of a job.
    pub fn job_run(&self, job: JobId) -> TrackingResult<Option<RunRow>> {
        let id: Option<String> = self
            .conn
            .query_row("SELECT id FROM runs WHERE job_id = ?1", [job], |r| r.get(0))
            .optional()?;
        match id {
            Some(id) => self.run(&id),
            None => Ok(None),
        }
    }

    /// Every run of these experiments, with params, tags and latest metrics.
    pub fn runs_in(&self, experiments: &[i64]) -> TrackingResult<Vec<RunRow>> {
        if experiments.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = experiments.iter().map(i64::to_string).collect();
        let sql = format!("{RUN_SELECT} WHERE r.experiment_id IN ({})", list.join(","));
        let mut stmt = self.conn.prepare(&sql)?;
        let mut runs: Vec<RunRow> = stmt
            .query_map([], read_run)?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .collect::<Result<_>>()?;
        self.fill(&mut runs)?;
        Ok(runs)
    }

    /// Adds params, tags and latest metrics to runs read without them.
    fn fill(&self, runs: &mut [RunRow]) -> TrackingResult<()> {
        let index: HashMap<String, usize> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        if index.is_empty() {
            return Ok(());
        }
        let one = runs.len() == 1;
        let filter = if one { "WHERE run_id = ?1" } else { "" };
        let arg: Vec<String> = if one {
            vec![runs[0].id.clone()]
        } else {
            vec![]
        };
        let arg = rusqlite::params_from_iter(arg.iter());
        {
            let mut stmt = self.conn.prepare_cached(&format!(
                "SELECT run_id, key, value FROM run_params {filter}"
            ))?;
            let mut rows = stmt.query(arg)?;
            while let Some(r) = rows.next()? {
                if let Some(&i) = index.get(&r.get::<_, String>(0)?) {
                    runs[i].params.insert(r.get(1)?, r.get(2)?);
                }
            }
        }
        let arg: Vec<String> = if one {
            vec![runs[0].id.clone()]
        } else {
            vec![]
        };
        {
            let mut stmt = self
                .conn
                .prepare_cached(&format!("SELECT run_id, key, value FROM run_tags {filter}"))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(arg.iter()))?;
            while let Some(r) = rows.next()? {
                if let Some(&i) = index.get(&r.get::<_, String>(0)?) {
                    runs[i].tags.insert(r.get(1)?, r.get(2)?);
                }
            }
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT run_id, key, last_step, last_time, last_value FROM metric_series {filter}"
        ))?;
        let mut rows = stmt.query(rusqlite::params_from_iter(arg.iter()))?;
        while let Some(r) = rows.next()? {
            if let Some(&i) = index.get(&r.get::<_, String>(0)?) {
                runs[i].metrics.insert(
                    r.get(1)?,
                    Point {
                        step: r.get(2)?,
                        time: r.get(3)?,
                        value: r.get::<_, Option<f64>>(4)?.unwrap_or(f64::NAN),
                    },
                );
            }
        }
        Ok(())
    }

    /// Changes a run's status, end time or name. A job's run keeps the job's
    /// status and times (the job is the truth); its name may change.
    pub fn update_run(&mut self, id: &str, update: &RunUpdate<'_>) -> TrackingResult<()> {
        if let Some(s) = update.status {
            if !RUN_STATUSES.contains(&s) {
                return Err(TrackingError::Invalid(format!(
                    "Invalid run status '{s}'; use one of {}",
                    RUN_STATUSES.join(", ")
                )));
            }
        }
        if let Some(name) = update.name {
            check_tag("mlflow.runName", name)?;
        }
        self.write(|tx| {
            let job: Option<Option<JobId>> = tx
                .query_row("SELECT job_id FROM runs WHERE id = ?1", [id], |r| r.get(0))
                .optional()?;
            let Some(job) = job else {
                return Err(no_run(id));
            };
            if job.is_none() {
                if let Some(s) = update.status {
                    tx.execute("UPDATE runs SET status = ?1 WHERE id = ?2", params![s, id])?;
                }
                if let Some(t) = update.end_time {
                    tx.execute(
                        "UPDATE runs SET end_time = ?1 WHERE id = ?2",
                        params![t, id],
                    )?;
                }
            }
            if let Some(name) = update.name {
                tx.execute("UPDATE runs SET name = ?1 WHERE id = ?2", params![name, id])?;
                put_tag(tx, id, "mlflow.runName", name)?;
            }
            Ok(())
        })
    }

    pub fn set_run_lifecycle(&mut self, id: &str, stage: &str) -> TrackingResult<()> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE runs SET lifecycle_stage = ?1 WHERE id = ?2",
                params![stage, id],
            )?;
            if n == 0 {
                return Err(no_run(id));
            }
            Ok(())
        })
    }

    pub fn delete_tag(&mut self, id: &str, key: &str) -> TrackingResult<()> {
        self.write(|tx| {
            ensure_run(tx, id)?;
            let n = tx.execute(
                "DELETE FROM run_tags WHERE run_id = ?1 AND key = ?2",
                params![id, key],
            )?;
            if n == 0 {
                return Err(TrackingError::NotFound(format!(
                    "No tag with name: {key} in run with id {id}"
                )));
            }
            Ok(())
        })
    }

    /// Logs metrics, params and tags in one transaction: all of it or none.
    pub fn log_batch(&mut self, run: &str, batch: &Batch) -> TrackingResult<()> {
        check_batch(batch)?;
        self.write(|tx| {
            ensure_run(tx, run)?;
            write_batch(tx, run, batch)
        })
    }

    /// Logs metrics read from a job's metrics file between `from` and `to` and
    /// moves the file's cursor, in one transaction: a crash re-reads exactly the
    /// lines not yet stored. When the cursor is no longer at `from` (another
    /// reader stored those lines first) nothing is written and it returns false.
    pub fn log_from_file(
        &mut self,
        job: JobId,
        metrics: &[MetricIn],
        from: u64,
        to: u64,
    ) -> TrackingResult<bool> {
        self.write(|tx| {
            let Some(run) = claim_file_range(tx, job, from, to)? else {
                return Ok(false);
            };
            write_metrics(tx, &run, metrics)?;
            Ok(true)
        })
    }

    /// When the job's run last logged a metric (its latest point's time, ms),
    /// or `None` before its first: a requeue without a new metric made no progress.
    pub fn last_metric_time(&self, job: JobId) -> TrackingResult<Option<i64>> {
        let at: Option<i64> = self.conn.query_row(
            "SELECT MAX(s.last_time) FROM metric_series s JOIN runs r ON s.run_id = r.id \
             WHERE r.job_id = ?1 AND s.count > 0",
            [job],
            |r| r.get(0),
        )?;
        Ok(at)
    }

    /// How far a job's metrics file has been read.
    pub fn metrics_file_offset(&self, job: JobId) -> TrackingResult<u64> {
        let off: Option<i64> = self
            .conn
            .query_row(
                "SELECT offset FROM metric_files WHERE job_id = ?1",
                [job],
                |r| r.get(0),
            )
            .optional()?;
        Ok(off.unwrap_or(0).max(0) as u64)
    }

    /// A metric's points in logged order, from `after` (a position from an
    /// earlier page; 0 for the start), at most `limit`; and the next position
    /// when more remain.
    pub fn metric_history(
        &self,
        run: &str,
        key: &str,
        after: u64,
        limit: usize,
    ) -> TrackingResult<(Vec<Point>, Option<u64>)> {
        let Some((series, count)) = self.series(run, key)? else {
            return Ok((Vec::new(), None));
        };
        let mut stmt = self.conn.prepare_cached(
            "SELECT step, time, value FROM metric_points WHERE series = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
        )?;
        let limit = limit.min(i64::MAX as usize);
        let points: Vec<Point> = stmt
            .query_map(params![series, after as i64, limit as i64], read_point)?
            .collect::<rusqlite::Result<_>>()?;
        let next = after + points.len() as u64;
        Ok((points, (next < count).then_some(next)))
    }

    /// A metric's history for a chart: every point when there are at most
    /// `max_points`, else min/max per bucket from the rollups. Returns the
    /// count of points too.
    pub fn metric_chart(
        &self,
        run: &str,
        key: &str,
        max_points: usize,
    ) -> TrackingResult<(u64, Vec<Point>, bool)> {
        let Some((series, count)) = self.series(run, key)? else {
            return Ok((0, Vec::new(), false));
        };
        let max_points = max_points.max(2);
        // Rollups serve only when there are enough of them for every bucket of the
        // chart; a shorter history is downsampled from its points (at most
        // max_points × 256 of them read, a few ms), not drawn from a handful of rollups.
        if count < max_points as u64 * ROLLUP_POINTS {
            let (points, _) = self.metric_history(run, key, 0, count as usize)?;
            let downsampled = count as usize > max_points;
            return Ok((count, downsample::min_max(&points, max_points), downsampled));
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT n, first_step, last_step, min_value, min_step, min_time, max_value, max_step, max_time \
             FROM metric_rollups WHERE series = ?1 ORDER BY bucket",
        )?;
        let rollups: Vec<Rollup> = stmt
            .query_map([series], read_rollup)?
            .collect::<rusqlite::Result<_>>()?;
        // The first and last point come from the raw table: rollups keep only steps at their ends.
        let first = self.point_at(series, 0)?;
        let last = self.point_at(series, count - 1)?;
        let mut rollups = rollups;
        if let (Some(r), Some(p)) = (rollups.first_mut(), first) {
            r.first = p;
        }
        if let (Some(r), Some(p)) = (rollups.last_mut(), last) {
            r.last = p;
        }
        Ok((count, downsample::from_rollups(&rollups, max_points), true))
    }

    fn point_at(&self, series: i64, seq: u64) -> TrackingResult<Option<Point>> {
        Ok(self
            .conn
            .query_row(
                "SELECT step, time, value FROM metric_points WHERE series = ?1 AND seq = ?2",
                params![series, seq as i64],
                read_point,
            )
            .optional()?)
    }

    fn series(&self, run: &str, key: &str) -> TrackingResult<Option<(i64, u64)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, count FROM metric_series WHERE run_id = ?1 AND key = ?2",
                params![run, key],
                |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)),
            )
            .optional()?)
    }

    /// The first point logged at or past `step`, else the last point logged:
    /// a sweep trial's result at its rung. Reads no more of the history than
    /// it must.
    pub fn point_at_or_after(
        &self,
        run: &str,
        key: &str,
        step: i64,
    ) -> TrackingResult<Option<Point>> {
        let Some((series, _)) = self.series(run, key)? else {
            return Ok(None);
        };
        let at = self
            .conn
            .prepare_cached(
                "SELECT step, time, value FROM metric_points WHERE series = ?1 AND step >= ?2 \
                 ORDER BY seq LIMIT 1",
            )?
            .query_row(params![series, step], read_point)
            .optional()?;
        if at.is_some() {
            return Ok(at);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT step, time, value FROM metric_points WHERE series = ?1 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![series], read_point)
            .optional()?)
    }

    /// A run's user, without its params, tags or metrics (the check before every write).
    pub fn run_user(&self, id: &str) -> TrackingResult<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT user FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()?)
    }

    /// A job's user and state, read on this connection (a job token is checked
    /// on every request without taking the scheduler's lock).
    pub fn job_user_and_state(&self, job: JobId) -> TrackingResult<Option<(String, JobState)>> {
        let row: Option<(String, String)> = self
            .conn
            .query_row("SELECT user, state FROM jobs WHERE id = ?1", [job], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        Ok(row.and_then(|(user, state)| Some((user, state.parse().ok()?))))
    }

    /// The metric keys of a run.
    pub fn metric_keys(&self, run: &str) -> TrackingResult<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key FROM metric_series WHERE run_id = ?1 ORDER BY key")?;
        let keys = stmt
            .query_map([run], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(keys)
    }
}

/// Writes a job's run in the job's own transaction (see `Store::submit`).
pub(crate) fn insert_job_run(
    tx: &Transaction<'_>,
    job: JobId,
    spec: &gpuq_core::JobSpec,
    user: &str,
    repro: Option<&str>,
    now: Millis,
) -> rusqlite::Result<()> {
    let experiment = match &spec.project {
        Some(p) => experiment_named(tx, p, now)?,
        None => 0,
    };
    let id = job.to_string();
    tx.execute(
        "INSERT INTO runs (id, experiment_id, job_id, name, user, status, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'SCHEDULED', ?6)",
        params![id, experiment, job, spec.name, user, now],
    )?;
    let name = spec.name.clone().unwrap_or_else(|| format!("job-{job}"));
    let mut tags = vec![
        ("mlflow.runName", name),
        ("mlflow.user", user.to_string()),
        ("mlflow.source.type", "JOB".to_string()),
        ("mlflow.source.name", spec.display_command()),
        ("gpuq.job_id", id.clone()),
    ];
    // The code it was submitted from, under the tags MLflow's own client sets.
    let git = repro
        .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
        .and_then(|r| r.get("git").cloned());
    for (tag, field) in [
        ("mlflow.source.git.commit", "commit"),
        ("mlflow.source.git.branch", "branch"),
        ("mlflow.source.git.repoURL", "remote"),
    ] {
        if let Some(v) = git
            .as_ref()
            .and_then(|g| g.get(field))
            .and_then(|v| v.as_str())
        {
            tags.push((tag, v.to_string()));
        }
    }
    for (k, v) in tags {
        let v: String = v.chars().take(MAX_TAG_VALUE_LEN).collect();
        tx.execute(
            "INSERT OR REPLACE INTO run_tags (run_id, key, value) VALUES (?1, ?2, ?3)",
            params![id, k, v],
        )?;
    }
    for (k, v) in &spec.params {
        tx.execute(
            "INSERT OR REPLACE INTO run_params (run_id, key, value) VALUES (?1, ?2, ?3)",
            params![id, k, gpuq_core::spec::param_text(v)],
        )?;
    }
    Ok(())
}

/// The experiment a job's run is filed under (its project's; a sweep's, shared
/// by sweeps of one name), made if missing. One a user made through the API
/// becomes gpuq's as the first run is filed under it: otherwise whoever made
/// it first would rename, tag or delete an experiment that holds other
/// users' runs. From then on only admins change it; a user's deletion is undone.
pub(crate) fn experiment_named(
    tx: &Transaction<'_>,
    name: &str,
    now: Millis,
) -> rusqlite::Result<i64> {
    let found = tx
        .query_row("SELECT id FROM experiments WHERE name = ?1", [name], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?;
    match found {
        Some(id) => {
            tx.execute(
                "UPDATE experiments SET owner = NULL, lifecycle_stage = 'active', updated_at = ?2 \
                 WHERE id = ?1 AND owner IS NOT NULL",
                params![id, now],
            )?;
            Ok(id)
        }
        None => insert_experiment(tx, name, now),
    }
}

/// A sweep's parent run: no job of its own; its trials' runs point at it.
pub(crate) fn insert_parent_run(
    tx: &Transaction<'_>,
    run: &str,
    experiment: i64,
    name: &str,
    user: &str,
    sweep: i64,
    now: Millis,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO runs (id, experiment_id, job_id, name, user, status, start_time, created_at) \
         VALUES (?1, ?2, NULL, ?3, ?4, 'RUNNING', ?5, ?5)",
        params![run, experiment, name, user, now],
    )?;
    for (k, v) in [
        ("mlflow.runName", name.to_string()),
        ("mlflow.user", user.to_string()),
        ("gpuq.sweep_id", sweep.to_string()),
    ] {
        tx.execute(
            "INSERT OR REPLACE INTO run_tags (run_id, key, value) VALUES (?1, ?2, ?3)",
            params![run, k, v],
        )?;
    }
    Ok(())
}

/// A trial's run (made with its job) moves into its sweep's experiment, under
/// the sweep's run, as MLflow's own client nests runs (`mlflow.parentRunId`).
pub(crate) fn make_child_run(
    tx: &Transaction<'_>,
    job: JobId,
    experiment: i64,
    parent: &str,
    sweep: i64,
    trial: u32,
) -> rusqlite::Result<()> {
    let id = job.to_string();
    tx.execute(
        "UPDATE runs SET experiment_id = ?2 WHERE id = ?1",
        params![id, experiment],
    )?;
    for (k, v) in [
        ("mlflow.parentRunId", parent.to_string()),
        ("gpuq.sweep_id", sweep.to_string()),
        ("gpuq.trial_id", trial.to_string()),
    ] {
        tx.execute(
            "INSERT OR REPLACE INTO run_tags (run_id, key, value) VALUES (?1, ?2, ?3)",
            params![id, k, v],
        )?;
    }
    Ok(())
}

fn insert_experiment(tx: &Transaction<'_>, name: &str, now: Millis) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO experiments (name, artifact_location, created_at, updated_at) VALUES (?1, '', ?2, ?2)",
        params![name, now],
    )?;
    let id = tx.last_insert_rowid();
    tx.execute(
        "UPDATE experiments SET artifact_location = ?1 WHERE id = ?2",
        params![format!("mlflow-artifacts:/{id}"), id],
    )?;
    Ok(id)
}

fn ensure_run(tx: &Transaction<'_>, id: &str) -> TrackingResult<()> {
    let stage: Option<String> = tx
        .query_row(
            "SELECT lifecycle_stage FROM runs WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    match stage.as_deref() {
        None => Err(no_run(id)),
        Some("deleted") => Err(TrackingError::Invalid(format!(
            "The run {id} must be in the 'active' state. Current state is deleted."
        ))),
        Some(_) => Ok(()),
    }
}

fn write_batch(tx: &Transaction<'_>, run: &str, batch: &Batch) -> TrackingResult<()> {
    for (k, v) in &batch.params {
        let old: Option<String> = tx
            .query_row(
                "SELECT value FROM run_params WHERE run_id = ?1 AND key = ?2",
                params![run, k],
                |r| r.get(0),
            )
            .optional()?;
        match old {
            Some(old) if &old != v => {
                return Err(TrackingError::Invalid(format!(
                    "Changing param values is not allowed. Param with key='{k}' was already logged \
                     with value='{old}' for run ID='{run}'. Attempted logging new value '{v}'."
                )))
            }
            Some(_) => {}
            None => {
                tx.execute(
                    "INSERT INTO run_params (run_id, key, value) VALUES (?1, ?2, ?3)",
                    params![run, k, v],
                )?;
            }
        }
    }
    for (k, v) in &batch.tags {
        put_tag(tx, run, k, v)?;
        if k == "mlflow.runName" {
            tx.execute("UPDATE runs SET name = ?1 WHERE id = ?2", params![v, run])?;
        }
    }
    write_metrics(tx, run, &batch.metrics)
}

fn put_tag(tx: &Transaction<'_>, run: &str, k: &str, v: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO run_tags (run_id, key, value) VALUES (?1, ?2, ?3)",
        params![run, k, v],
    )?;
    Ok(())
}

/// Moves a job's metrics file cursor from `from` to `to` and returns the job's
/// run; `None` (nothing moved) when the cursor is no longer at `from`.
fn claim_file_range(
    tx: &Transaction<'_>,
    job: JobId,
    from: u64,
    to: u64,
) -> TrackingResult<Option<String>> {
    let at: Option<i64> = tx
        .query_row(
            "SELECT offset FROM metric_files WHERE job_id = ?1",
            [job],
            |r| r.get(0),
        )
        .optional()?;
    if at.unwrap_or(0) as u64 != from {
        return Ok(None);
    }
    let run: Option<String> = tx
        .query_row("SELECT id FROM runs WHERE job_id = ?1", [job], |r| r.get(0))
        .optional()?;
    let Some(run) = run else {
        return Err(TrackingError::NotFound(format!("job {job} has no run")));
    };
    tx.execute(
        "INSERT INTO metric_files (job_id, offset) VALUES (?1, ?2) \
         ON CONFLICT (job_id) DO UPDATE SET offset = excluded.offset",
        params![job, to as i64],
    )?;
    Ok(Some(run))
}

/// Appends points per series, keeping each series' count, latest point and rollups.
fn write_metrics(tx: &Transaction<'_>, run: &str, metrics: &[MetricIn]) -> TrackingResult<()> {
    struct Open {
        series: i64,
        count: u64,
        latest: Option<Point>,
        rollups: BTreeMap<u64, Rollup>,
    }
    let mut open: HashMap<&str, Open> = HashMap::new();
    let mut insert = tx.prepare_cached(
        "INSERT INTO metric_points (series, seq, step, time, value) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for m in metrics {
        if !open.contains_key(m.key.as_str()) {
            let row: Option<(i64, i64, i64, i64, Option<f64>)> = tx
                .query_row(
                    "SELECT id, count, last_step, last_time, last_value FROM metric_series WHERE run_id = ?1 AND key = ?2",
                    params![run, m.key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()?;
            let entry = match row {
                Some((series, count, step, time, value)) => Open {
                    series,
                    count: count as u64,
                    latest: Some(Point {
                        step,
                        time,
                        value: value.unwrap_or(f64::NAN),
                    }),
                    rollups: BTreeMap::new(),
                },
                None => {
                    tx.execute(
                        "INSERT INTO metric_series (run_id, key, count, last_step, last_time) VALUES (?1, ?2, 0, 0, 0)",
                        params![run, m.key],
                    )?;
                    Open {
                        series: tx.last_insert_rowid(),
                        count: 0,
                        latest: None,
                        rollups: BTreeMap::new(),
                    }
                }
            };
            open.insert(m.key.as_str(), entry);
        }
        let s = open.get_mut(m.key.as_str()).expect("inserted above");
        let p = Point {
            step: m.step.unwrap_or(s.count as i64),
            time: m.time,
            value: m.value,
        };
        insert.execute(params![
            s.series,
            s.count as i64,
            p.step,
            p.time,
            (!p.value.is_nan()).then_some(p.value)
        ])?;
        let bucket = s.count / ROLLUP_POINTS;
        s.rollups
            .entry(bucket)
            .and_modify(|r| r.add(p))
            .or_insert_with(|| Rollup::of(p));
        s.count += 1;
        // MLflow's latest value: the highest step, then the latest time.
        if s.latest
            .is_none_or(|l| (p.step, p.time) >= (l.step, l.time))
        {
            s.latest = Some(p);
        }
    }
    drop(insert);
    for s in open.values() {
        let latest = s.latest.expect("a series written here has a point");
        tx.execute(
            "UPDATE metric_series SET count = ?1, last_step = ?2, last_time = ?3, last_value = ?4 WHERE id = ?5",
            params![
                s.count as i64,
                latest.step,
                latest.time,
                (!latest.value.is_nan()).then_some(latest.value),
                s.series
            ],
        )?;
        for (bucket, fresh) in &s.rollups {
            let stored: Option<Rollup> = tx
                .query_row(
                    "SELECT n, first_step, last_step, min_value, min_step, min_time, max_value, max_step, max_time \
                     FROM metric_rollups WHERE series = ?1 AND bucket = ?2",
                    params![s.series, *bucket as i64],
                    read_rollup,
                )
                .optional()?;
            let merged = match stored {
                Some(mut r) => {
                    r.merge(fresh);
                    r
                }
                None => *fresh,
            };
            let ext = |p: Option<Point>| (p.map(|p| p.value), p.map(|p| p.step), p.map(|p| p.time));
            let (min_v, min_s, min_t) = ext(merged.min);
            let (max_v, max_s, max_t) = ext(merged.max);
            tx.execute(
                "INSERT OR REPLACE INTO metric_rollups \
                 (series, bucket, n, first_step, last_step, min_value, min_step, min_time, max_value, max_step, max_time) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    s.series,
                    *bucket as i64,
                    merged.n as i64,
                    merged.first.step,
                    merged.last.step,
                    min_v,
                    min_s,
                    min_t,
                    max_v,
                    max_s,
                    max_t
                ],
            )?;
        }
    }
    Ok(())
}

fn read_point(r: &rusqlite::Row<'_>) -> rusqlite::Result<Point> {
    Ok(Point {
        step: r.get(0)?,
        time: r.get(1)?,
        value: r.get::<_, Option<f64>>(2)?.unwrap_or(f64::NAN),
    })
}

/// A stored rollup; its first and last points carry only their steps (values are NaN).
fn read_rollup(r: &rusqlite::Row<'_>) -> rusqlite::Result<Rollup> {
    let ext = |v: usize| -> rusqlite::Result<Option<Point>> {
        let value: Option<f64> = r.get(v)?;
        let step: Option<i64> = r.get(v + 1)?;
        let time: Option<i64> = r.get(v + 2)?;
        Ok(match (value, step, time) {
            (Some(value), Some(step), Some(time)) => Some(Point { step, time, value }),
            _ => None,
        })
    };
    let end = |step: i64| Point {
        step,
        time: 0,
        value: f64::NAN,
    };
    Ok(Rollup {
        n: r.get::<_, i64>(0)? as u64,
        first: end(r.get(1)?),
        last: end(r.get(2)?),
        min: ext(3)?,
        max: ext(6)?,
    })
}

fn read_experiment(r: &rusqlite::Row<'_>) -> rusqlite::Result<ExperimentRow> {
    Ok(ExperimentRow {
        id: r.get(0)?,
        name: r.get(1)?,
        artifact_location: r.get(2)?,
        lifecycle_stage: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
        owner: r.get(6)?,
        tags: BTreeMap::new(),
    })
}

fn read_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunRow>> {
    let job: Option<JobId> = r.get(2)?;
    let own_status: String = r.get(5)?;
    let job_state: Option<String> = r.get(6)?;
    let status = match (job, job_state) {
        (Some(id), Some(s)) => match s.parse::<JobState>() {
            Ok(state) => run_status(state).to_string(),
            Err(_) => {
                return Ok(Err(StoreError::Corrupt {
                    id,
                    why: format!("state {s:?}"),
                }))
            }
        },
        _ => own_status,
    };
    Ok(Ok(RunRow {
        id: r.get(0)?,
        experiment_id: r.get(1)?,
        job,
        name: r.get(3)?,
        user: r.get(4)?,
        status,
        start_time: r.get(7)?,
        end_time: r.get(8)?,
        lifecycle_stage: r.get(9)?,
        params: BTreeMap::new(),
        tags: BTreeMap::new(),
        metrics: BTreeMap::new(),
    }))
}

fn no_run(id: &str) -> TrackingError {
    TrackingError::NotFound(format!("Run with id={id} not found"))
}

fn no_experiment(id: i64) -> TrackingError {
    TrackingError::NotFound(format!("No Experiment with id={id} exists"))
}

fn check_key(key: &str, what: &str) -> TrackingResult<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(TrackingError::Invalid(format!(
            "Invalid value for parameter '{what}': a key is 1 to {MAX_KEY_LEN} characters, got {}",
            key.len()
        )));
    }
    // MLflow's rule: names that could escape a path are refused.
    let bad_char = key
        .chars()
        .find(|c| !(c.is_alphanumeric() || "_-. /:".contains(*c)));
    if let Some(c) = bad_char {
        return Err(TrackingError::Invalid(format!(
            "Invalid value \"{key}\" for parameter '{what}': names may only contain alphanumerics, \
             underscores (_), dashes (-), periods (.), spaces ( ), colons (:) and slashes (/); found {c:?}"
        )));
    }
    if key.split('/').any(|part| part == "..") || key.starts_with('/') {
        return Err(TrackingError::Invalid(format!(
            "Invalid value \"{key}\" for parameter '{what}': a name may not be a path that escapes its run"
        )));
    }
    Ok(())
}

pub fn check_tag(key: &str, value: &str) -> TrackingResult<()> {
    check_key(key, "tag key")?;
    if value.len() > MAX_TAG_VALUE_LEN {
        return Err(TrackingError::Invalid(format!(
            "Invalid value for parameter 'value' of tag '{key}': {} bytes; the limit is {MAX_TAG_VALUE_LEN}",
            value.len()
        )));
    }
    Ok(())
}

fn check_experiment_name(name: &str) -> TrackingResult<()> {
    if name.trim().is_empty() {
        return Err(TrackingError::Invalid(
            "Invalid experiment name: '' (give a non-empty name)".into(),
        ));
    }
    if name.len() > MAX_EXPERIMENT_NAME_LEN || name.chars().any(char::is_control) {
        return Err(TrackingError::Invalid(format!(
            "Invalid experiment name: at most {MAX_EXPERIMENT_NAME_LEN} printable characters"
        )));
    }
    Ok(())
}

/// MLflow's limits on one request, checked before anything is written.
pub fn check_batch(batch: &Batch) -> TrackingResult<()> {
    let over = |what: &str, n: usize, max: usize| {
        TrackingError::Invalid(format!(
            "A batch logging request can contain at most {max} {what}. Got {n} {what}. \
             Please split up {what} across multiple requests and try again."
        ))
    };
    if batch.metrics.len() > MAX_BATCH_METRICS {
        return Err(over("metrics", batch.metrics.len(), MAX_BATCH_METRICS));
    }
    if batch.params.len() > MAX_BATCH_PARAMS {
        return Err(over("params", batch.params.len(), MAX_BATCH_PARAMS));
    }
    if batch.tags.len() > MAX_BATCH_TAGS {
        return Err(over("tags", batch.tags.len(), MAX_BATCH_TAGS));
    }
    for m in &batch.metrics {
        check_key(&m.key, "metric key")?;
    }
    let mut seen = HashMap::new();
    for (k, v) in &batch.params {
        check_key(k, "param key")?;
        if v.len() > MAX_PARAM_VALUE_LEN {
            return Err(TrackingError::Invalid(format!(
                "Param value '{}…' had length {}, which exceeded length limit of {MAX_PARAM_VALUE_LEN}",
                v.chars().take(40).collect::<String>(),
                v.len()
            )));
        }
        if let Some(old) = seen.insert(k.as_str(), v.as_str()) {
            if old != v {
                return Err(TrackingError::Invalid(format!(
                    "Duplicate parameter keys have been submitted: [{k}]. Please ensure the request \
                     contains only one param value per param key."
                )));
            }
        }
    }
    for (k, v) in &batch.tags {
        check_tag(k, v)?;
    }
    Ok(())
}

#[path = "tracking_limits.rs"]
mod limits;
pub use limits::{DropReason, Dropped, Drops, MetricCaps};

#[cfg(test)]
#[path = "tracking_tests.rs"]
mod tests;
