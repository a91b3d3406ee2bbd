//! SQLite persistence for gpuq.
//!
//! Current-state tables (`jobs`, `attempts`) plus an append-only `events` table,
//! written in one transaction per state change: a change is durable, with its
//! event row, before the daemon carries out its side effect.

mod arrays;
pub mod envs;
mod feed;
mod repro;
mod schema;
pub mod sweeps;
pub mod tracking;
pub mod web;

use gpuq_core::cost::Micros;
use gpuq_core::{Attempt, Event, Job, JobId, JobSpec, JobState, Millis, Priority};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the disk holding the gpuq database is full; free space and retry (nothing was written)"
    )]
    DiskFull,
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("corrupt row for job {id}: {why}")]
    Corrupt { id: JobId, why: String },
    #[error("the database was written by a newer gpuq (schema {found}, this build knows {known}); upgrade gpuq")]
    TooNew { found: i64, known: i64 },
}

impl StoreError {
    fn from_sqlite(e: rusqlite::Error) -> Self {
        match &e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull => {
                StoreError::DiskFull
            }
            _ => StoreError::Sqlite(e),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A job as submitted, with the submitter's context resolved.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub spec: JobSpec,
    pub user: String,
    pub cwd: String,
    /// The submitter's environment with the spec's overrides applied.
    pub env: BTreeMap<String, String>,
    /// A submit repeated with the same key returns the first job instead of a new one.
    pub idempotency_key: Option<String>,
    /// What it was submitted from (`gpuq_api::repro::Repro` as JSON).
    pub repro: Option<String>,
}

/// What the executor needs to start an attempt.
#[derive(Debug, Clone)]
pub struct LaunchInfo {
    pub spec: JobSpec,
    /// Failed attempts so far (counted against `spec.retries`).
    pub failures: u32,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
}

/// A start decided by the scheduler.
#[derive(Debug, Clone)]
pub struct StartRecord {
    pub job: JobId,
    pub node: String,
    pub gpus: Vec<u32>,
    /// What the attempt costs per hour on its node; `None`: the node has no price.
    pub rate: Option<Micros>,
    /// What it runs on (`gpuq_api::repro::RuntimeInfo` as JSON; its attempt is set here).
    pub runtime: Option<String>,
}

/// How an attempt ended, and what becomes of the job.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    pub job: JobId,
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The job's next state: a terminal state, or `Queued` for a retry or requeue.
    pub next_state: JobState,
    pub reason: String,
    /// Failed attempts so far, this one included if it counts.
    pub failures: u32,
    /// Earliest start of the next attempt (retry back-off).
    pub eligible_at: Option<Millis>,
    /// Event kind recorded for the transition ("succeeded", "retry", "preempted", …).
    pub event: String,
    /// The attempt's GPU figures, when telemetry saw it run.
    pub gpu_usage: Option<gpuq_core::telemetry::JobGpuUsage>,
    /// Its memory and CPU as its cgroup counted them, when it ran confined.
    pub host_usage: Option<gpuq_core::job::HostUsage>,
    /// Back in the queue held by this (a sweep trial paused at its rung, which
    /// waits for promotion without holding a GPU); with a `Queued` next state only.
    pub held_by: Option<String>,
}

/// An API token as listed (the secret itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: i64,
    pub user: String,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

/// One attempt, for usage accounting.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub job: JobId,
    pub attempt: u32,
    pub user: String,
    pub project: Option<String>,
    pub gpus: u32,
    pub started_at: Millis,
    /// `None` while running.
    pub ended_at: Option<Millis>,
    pub rate: Option<Micros>,
    pub gpu_usage: Option<gpuq_core::telemetry::JobGpuUsage>,
}

/// Filter of `list`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<JobState>,
    pub limit: Option<u32>,
    pub user: Option<String>,
    pub project: Option<String>,
    /// Only jobs with a smaller id (paging newest first).
    pub before: Option<JobId>,
    /// Only jobs with a larger id (paging back towards the newest).
    pub after: Option<JobId>,
}

impl ListFilter {
    /// The `WHERE` conditions besides the states (bound, never spliced), on `alias.`.
    fn conditions(&self, alias: &str) -> (Vec<String>, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value;
        let mut conds = Vec::new();
        let mut values = Vec::new();
        if let Some(user) = &self.user {
            conds.push(format!("{alias}user = ?"));
            values.push(Value::Text(user.clone()));
        }
        if let Some(project) = &self.project {
            conds.push(format!("{alias}project = ?"));
            values.push(Value::Text(project.clone()));
        }
        if let Some(before) = self.before {
            conds.push(format!("{alias}id < ?"));
            values.push(Value::Integer(before as i64));
        }
        if let Some(after) = self.after {
            conds.push(format!("{alias}id > ?"));
            values.push(Value::Integer(after as i64));
        }
        (conds, values)
    }

    fn states_sql(&self) -> Option<String> {
        (!self.states.is_empty()).then(|| {
            let states: Vec<String> = self
                .states
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            states.join(",")
        })
    }
}

pub struct Store {
    conn: Connection,
}

const JOB_COLUMNS: &str =
    "id, name, user, project, state, priority, gpus_requested, gpus, node, command, cwd, \
     attempt, exit_code, signal, reason, submitted_at, started_at, ended_at, spec, failures, held_by, eligible_at, cost_micros, \
     array_id, array_index, array_limit";

impl Store {
    /// Opens (creating if needed) the database, with WAL and the durability settings
    /// documented in docs/ARCHITECTURE.md.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path).map_err(StoreError::from_sqlite)?;
        schema::configure(&conn)?;
        schema::migrate(&conn)?;
        Ok(Self { conn })
    }

    pub fn open_in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory()?;
        schema::migrate(&conn)?;
        Ok(Self { conn })
    }

    fn write<T>(&mut self, f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>) -> Result<T> {
        let tx = self.conn.transaction().map_err(StoreError::from_sqlite)?;
        let out = f(&tx).map_err(StoreError::from_sqlite)?;
        tx.commit().map_err(StoreError::from_sqlite)?;
        Ok(out)
    }

    /// Inserts a queued job. With an idempotency key already used, returns that job instead.
    pub fn submit(&mut self, new: &NewJob, now: Millis) -> Result<Job> {
        if let Some(key) = &new.idempotency_key {
            let existing: Option<JobId> = self
                .conn
                .query_row(
                    "SELECT id FROM jobs WHERE idempotency_key = ?1 AND user = ?2",
                    params![key, new.user],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = existing {
                return self.job(id)?.ok_or(StoreError::Corrupt {
                    id,
                    why: "vanished".into(),
                });
            }
        }
        let id = self.write(|tx| insert_job(tx, new, now))?;
        self.job(id)?.ok_or(StoreError::Corrupt {
            id,
            why: "vanished after insert".into(),
        })
    }

    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
        let row = self.conn.query_row(&sql, [id], read_job).optional()?;
        row.transpose()
    }

    pub fn state(&self, id: JobId) -> Result<Option<JobState>> {
        let s: Option<String> = self
            .conn
            .query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .optional()?;
        s.map(|s| {
            s.parse().map_err(|_| StoreError::Corrupt {
                id,
                why: format!("state {s:?}"),
            })
        })
        .transpose()
    }

    /// Newest first (oldest first with `after`, for paging back; the page is
    /// then reversed so it still reads newest first).
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Job>> {
        let (mut conds, values) = filter.conditions("");
        if let Some(states) = filter.states_sql() {
            conds.push(format!("state IN ({states})"));
        }
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs");
        if !conds.is_empty() {
            sql.push_str(&format!(" WHERE {}", conds.join(" AND ")));
        }
        let ascending = filter.after.is_some() && filter.before.is_none();
        sql.push_str(if ascending {
            " ORDER BY id ASC"
        } else {
            " ORDER BY id DESC"
        });
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut jobs = self.readable_jobs(&sql, values)?;
        if ascending {
            jobs.reverse();
        }
        Ok(jobs)
    }

    /// How many jobs `filter` selects, without its limit and page bounds.
    pub fn count(&self, filter: &ListFilter) -> Result<u64> {
        let whole = ListFilter {
            before: None,
            after: None,
            ..filter.clone()
        };
        let (mut conds, values) = whole.conditions("");
        if let Some(states) = whole.states_sql() {
            conds.push(format!("state IN ({states})"));
        }
        let mut sql = "SELECT COUNT(*) FROM jobs".to_string();
        if !conds.is_empty() {
            sql.push_str(&format!(" WHERE {}", conds.join(" AND ")));
        }
        let n: i64 = self
            .conn
            .query_row(&sql, rusqlite::params_from_iter(values), |r| r.get(0))?;
        Ok(n as u64)
    }

    /// The jobs `sql` selects (`JOB_COLUMNS`, `values` bound to its `?`s), skipping
    /// unreadable rows: one must not hide every other job (or stop the daemon).
    pub(crate) fn readable_jobs(
        &self,
        sql: &str,
        values: Vec<rusqlite::types::Value>,
    ) -> Result<Vec<Job>> {
        let mut stmt = self.conn.prepare(sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(values), read_job)?;
        let mut jobs = Vec::new();
        for row in rows {
            match row? {
                Ok(job) => jobs.push(job),
                Err(StoreError::Corrupt { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(jobs)
    }

    /// Every job's id and state, for dependency lookups.
    pub fn all_states(&self) -> Result<Vec<(JobId, JobState)>> {
        let mut stmt = self.conn.prepare("SELECT id, state FROM jobs")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, JobId>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, s) = row?;
            out.push((
                id,
                s.parse().map_err(|_| StoreError::Corrupt {
                    id,
                    why: format!("state {s:?}"),
                })?,
            ));
        }
        Ok(out)
    }

    pub fn launch_info(&self, id: JobId) -> Result<LaunchInfo> {
        let (spec, cwd, env, failures): (String, String, String, u32) = self.conn.query_row(
            "SELECT spec, cwd, env, failures FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let spec: JobSpec = serde_json::from_str(&spec).map_err(|e| StoreError::Corrupt {
            id,
            why: e.to_string(),
        })?;
        let env = serde_json::from_str(&env).map_err(|e| StoreError::Corrupt {
            id,
            why: e.to_string(),
        })?;
        Ok(LaunchInfo {
            argv: spec.argv(),
            spec,
            failures,
            cwd,
            env,
        })
    }

    /// Marks the jobs running, one new attempt each, in one transaction; returns the attempt numbers.
    pub fn start(&mut self, starts: &[StartRecord], now: Millis) -> Result<Vec<u32>> {
        self.write(|tx| start_in(tx, starts, now))
    }

    /// One scheduling pass's decisions, all or nothing: queued jobs that end
    /// without running, and starts (their attempt numbers are returned).
    pub fn apply_pass(
        &mut self,
        ends: &[(JobId, JobState, String)],
        starts: &[StartRecord],
        now: Millis,
    ) -> Result<Vec<u32>> {
        self.write(|tx| {
            end_queued_in(tx, ends, now)?;
            start_in(tx, starts, now)
        })
    }

    pub fn finish_attempt(&mut self, end: &AttemptEnd, now: Millis) -> Result<()> {
        self.write(|tx| {
            // The attempt's cost, at the rate recorded when it started, joins the job's.
            let (rate, started_at): (Option<i64>, Millis) = tx.query_row(
                "SELECT rate_micros, started_at FROM attempts WHERE job_id = ?1 AND attempt = ?2",
                params![end.job, end.attempt],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            if let Some(rate) = rate {
                let cost = gpuq_core::cost::cumulative(Micros(rate), now - started_at);
                tx.execute(
                    "UPDATE jobs SET cost_micros = COALESCE(cost_micros, 0) + ?2 WHERE id = ?1",
                    params![end.job, cost.0],
                )?;
            }
            tx.execute(
                "UPDATE attempts SET ended_at = ?3, exit_code = ?4, signal = ?5, reason = ?6, gpu_usage = ?7, \
                 host_usage = ?8 WHERE job_id = ?1 AND attempt = ?2",
                params![
                    end.job,
                    end.attempt,
                    now,
                    end.exit_code,
                    end.signal,
                    end.reason,
                    end.gpu_usage.as_ref().and_then(|u| serde_json::to_string(u).ok()),
                    end.host_usage.as_ref().and_then(|u| serde_json::to_string(u).ok())
                ],
            )?;
            let ended_at = end.next_state.is_terminal().then_some(now);
            tx.execute(
                "UPDATE jobs SET state = ?2, exit_code = ?3, signal = ?4, reason = ?5, ended_at = ?6, failures = ?7, \
                 eligible_at = ?8 WHERE id = ?1",
                params![
                    end.job,
                    end.next_state.as_str(),
                    end.exit_code,
                    end.signal,
                    end.reason,
                    ended_at,
                    end.failures,
                    end.eligible_at
                ],
            )?;
            if !end.next_state.is_terminal() {
                back_in_queue(tx, end.job)?;
                if let Some(by) = &end.held_by {
                    tx.execute(
                        "UPDATE jobs SET held_by = ?2 WHERE id = ?1",
                        params![end.job, by],
                    )?;
                }
            }
            insert_event(tx, now, end.job, &end.event, &format!("attempt {}: {}", end.attempt, end.reason))
        })
    }

    /// Records the backend's id of an attempt (Slurm's job id, right after
    /// `sbatch` answered), by which a restarted daemon re-attaches. The column
    /// keeps its API name, `slurm_job_id`.
    pub fn set_backend_id(
        &mut self,
        job: JobId,
        attempt: u32,
        slurm_id: u64,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE attempts SET slurm_job_id = ?3 WHERE job_id = ?1 AND attempt = ?2",
                params![job, attempt, slurm_id],
            )?;
            insert_event(
                tx,
                now,
                job,
                "submitted_to_slurm",
                &format!("attempt {attempt}: Slurm job {slurm_id}"),
            )
        })
    }

    /// The attempt began running now (a backend that queues: Slurm): its start,
    /// and the job's, move to `at`, and its price applies from here (a job
    /// waiting in Slurm's queue costs nothing).
    /// With `nodes` `None`, the attempt never ran (ended while Slurm held it):
    /// only its start moves, so it is charged nothing, and no event is written.
    pub fn set_attempt_started(
        &mut self,
        job: JobId,
        attempt: u32,
        at: Millis,
        nodes: Option<&str>,
        rate: Option<Micros>,
    ) -> Result<()> {
        let Some(nodes) = nodes else {
            return self.write(|tx| {
                tx.execute(
                    "UPDATE attempts SET started_at = ?3 WHERE job_id = ?1 AND attempt = ?2",
                    params![job, attempt, at],
                )
                .map(|_| ())
            });
        };
        self.write(|tx| {
            tx.execute(
                "UPDATE attempts SET started_at = ?3, node = ?4, rate_micros = ?5, \
                 runtime = json_set(runtime, '$.hostname', ?4, '$.captured_at', ?3) WHERE job_id = ?1 AND attempt = ?2",
                params![job, attempt, at, nodes, rate.map(|r| r.0)],
            )?;
            tx.execute(
                "UPDATE jobs SET started_at = ?2, node = ?3 WHERE id = ?1",
                params![job, at, nodes],
            )?;
            insert_event(tx, at, job, "running", &format!("attempt {attempt} running on {nodes}"))
        })
    }

    /// Records why an attempt is being stopped, before any signal is sent.
    pub fn set_stop(
        &mut self,
        job: JobId,
        attempt: u32,
        stop: &str,
        detail: &str,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE attempts SET stop = ?3 WHERE job_id = ?1 AND attempt = ?2",
                params![job, attempt, stop],
            )?;
            insert_event(tx, now, job, "stop_requested", detail)
        })
    }

    /// The stop recorded for an attempt by [`Store::set_stop`].
    pub fn stop_of(&self, job: JobId, attempt: u32) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT stop FROM attempts WHERE job_id = ?1 AND attempt = ?2",
                params![job, attempt],
                |r| r.get(0),
            )
            .optional()?
            .flatten())
    }

    /// Holds (`held_by: Some(user)`) or releases (`None`) a queued job; `by` asked for it.
    pub fn set_held(
        &mut self,
        job: JobId,
        held_by: Option<&str>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE jobs SET held_by = ?2 WHERE id = ?1",
                params![job, held_by],
            )?;
            let kind = if held_by.is_some() {
                "held"
            } else {
                "released"
            };
            insert_event(tx, now, job, kind, &format!("by {by}"))
        })
    }

    /// A preempted job (a transient state) goes back to the queue.
    pub fn requeue_preempted(&mut self, job: JobId, now: Millis) -> Result<()> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE jobs SET state = 'queued' WHERE id = ?1 AND state = 'preempted'",
                [job],
            )?;
            if n > 0 {
                insert_event(tx, now, job, "requeued", "after preemption")?;
            }
            Ok(())
        })
    }

    /// Puts an ended job back in the queue with a fresh retry budget.
    pub fn requeue_ended(&mut self, job: JobId, by: &str, now: Millis) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE jobs SET state = 'queued', failures = 0, eligible_at = NULL, ended_at = NULL, \
                 reason = ?2 WHERE id = ?1",
                params![job, format!("requeued by {by}")],
            )?;
            back_in_queue(tx, job)?;
            insert_event(tx, now, job, "requeued", &format!("by {by}"))
        })
    }

    /// Every attempt's owner, GPU count and times, for usage accounting.
    pub fn usage_rows(&self) -> Result<Vec<UsageRow>> {
        self.usage_rows_between(Millis::MIN, Millis::MAX)
    }

    /// Attempts that ran at some time in `since`..`until` (running ones included).
    pub fn usage_rows_between(&self, since: Millis, until: Millis) -> Result<Vec<UsageRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT a.job_id, a.attempt, j.user, j.project, json_array_length(a.gpus), a.started_at, a.ended_at, \
             a.rate_micros, a.gpu_usage FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE a.started_at < ?2 AND (a.ended_at IS NULL OR a.ended_at > ?1)",
        )?;
        let rows = stmt.query_map(params![since, until], |r| {
            Ok(UsageRow {
                job: r.get(0)?,
                attempt: r.get(1)?,
                user: r.get(2)?,
                project: r.get(3)?,
                gpus: r.get(4)?,
                started_at: r.get(5)?,
                ended_at: r.get(6)?,
                rate: r.get::<_, Option<i64>>(7)?.map(Micros),
                gpu_usage: r
                    .get::<_, Option<String>>(8)?
                    .and_then(|u| serde_json::from_str(&u).ok()),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Stores a new API token's hash for `user`; returns its id.
    pub fn create_token(&mut self, user: &str, hash: &[u8], now: Millis) -> Result<i64> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO tokens (user, hash, created_at) VALUES (?1, ?2, ?3)",
                params![user, hash, now],
            )?;
            Ok(tx.last_insert_rowid())
        })
    }

    /// The user of a valid (not revoked) token, found by its hash.
    pub fn token_user(&self, hash: &[u8]) -> Result<Option<(i64, String, Vec<u8>)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, user, hash FROM tokens WHERE hash = ?1 AND revoked_at IS NULL",
                [hash],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?)
    }

    pub fn tokens(&self) -> Result<Vec<TokenRecord>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, user, created_at, revoked_at FROM tokens ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(TokenRecord {
                id: r.get(0)?,
                user: r.get(1)?,
                created_at: r.get(2)?,
                revoked_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Revokes a token; false when there is no such (unrevoked) token.
    pub fn revoke_token(&mut self, id: i64, now: Millis) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now],
            )? > 0)
        })
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }

    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )?;
            Ok(())
        })
    }

    /// SQLite's own consistency check: "ok" when the database is intact.
    pub fn integrity_check(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
    }

    /// Ends queued jobs without running them (dependency failed, too large, cancelled).
    pub fn end_queued(&mut self, ends: &[(JobId, JobState, String)], now: Millis) -> Result<()> {
        self.write(|tx| end_queued_in(tx, ends, now))
    }

    pub fn record_event(
        &mut self,
        job: JobId,
        kind: &str,
        detail: &str,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| insert_event(tx, now, job, kind, detail))
    }

    pub fn attempts(&self, job: JobId) -> Result<Vec<Attempt>> {
        let mut stmt = self.conn.prepare(
            "SELECT job_id, attempt, node, gpus, started_at, ended_at, exit_code, signal, reason, gpu_usage, rate_micros, \
             slurm_job_id, host_usage FROM attempts \
             WHERE job_id = ?1 ORDER BY attempt",
        )?;
        let rows = stmt.query_map([job], |r| {
            let gpus: String = r.get(3)?;
            Ok(Attempt {
                job_id: r.get(0)?,
                attempt: r.get(1)?,
                node: r.get(2)?,
                gpus: serde_json::from_str(&gpus).unwrap_or_default(),
                started_at: r.get(4)?,
                ended_at: r.get(5)?,
                exit_code: r.get(6)?,
                signal: r.get(7)?,
                reason: r.get(8)?,
                gpu_usage: r
                    .get::<_, Option<String>>(9)?
                    .and_then(|u| serde_json::from_str(&u).ok()),
                rate_per_hour: r.get::<_, Option<i64>>(10)?.map(Micros),
                slurm_job_id: r.get(11)?,
                host_usage: r
                    .get::<_, Option<String>>(12)?
                    .and_then(|u| serde_json::from_str(&u).ok()),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn events(&self, job: JobId) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, at, job_id, kind, detail FROM events WHERE job_id = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([job], event_of)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// An `events` row selected as `seq, at, job_id, kind, detail`.
pub(crate) fn event_of(r: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: r.get(0)?,
        at: r.get(1)?,
        job_id: r.get(2)?,
        kind: r.get(3)?,
        detail: r.get(4)?,
    })
}

fn start_in(
    tx: &Transaction<'_>,
    starts: &[StartRecord],
    now: Millis,
) -> rusqlite::Result<Vec<u32>> {
    let mut attempts = Vec::with_capacity(starts.len());
    for s in starts {
        let gpus = serde_json::to_string(&s.gpus).expect("gpus serialize");
        let attempt: u32 = tx.query_row(
                    "UPDATE jobs SET state = 'running', attempt = attempt + 1, gpus = ?2, node = ?3, started_at = ?4, \
                     exit_code = NULL, signal = NULL, reason = NULL WHERE id = ?1 AND state = 'queued' RETURNING attempt",
                    params![s.job, gpus, s.node, now],
                    |r| r.get(0),
                )?;
        let rate = s.rate.map(|r| r.0);
        tx.execute(
            "INSERT INTO attempts (job_id, attempt, node, gpus, started_at, rate_micros, runtime) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, json_set(?7, '$.attempt', ?2))",
            params![s.job, attempt, s.node, gpus, now, rate, s.runtime],
        )?;
        insert_event(
            tx,
            now,
            s.job,
            "started",
            &format!("attempt {attempt} on {} gpus {gpus}", s.node),
        )?;
        attempts.push(attempt);
    }
    Ok(attempts)
}

/// A job back in the queue holds no GPUs and has no running attempt: its last
/// attempt's GPUs and start stay in its attempts, and a later end while queued
/// (cancelled in its back-off) is not mistaken for a run that long.
/// Inserts a queued job with its event and its tracked run.
fn insert_job(tx: &Transaction<'_>, new: &NewJob, now: Millis) -> rusqlite::Result<JobId> {
    let spec_json = serde_json::to_string(&new.spec).expect("spec serializes");
    let env_json = serde_json::to_string(&new.env).expect("env serializes");
    tx.execute(
            "INSERT INTO jobs (name, user, project, state, priority, gpus_requested, gpus, command, cwd, \
             attempt, submitted_at, spec, env, idempotency_key, repro) \
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5, '[]', ?6, ?7, 0, ?8, ?9, ?10, ?11, ?12)",
            params![
                new.spec.name,
                new.user,
                new.spec.project,
                priority_rank(new.spec.priority),
                new.spec.gpus,
                new.spec.display_command(),
                new.cwd,
                now,
                spec_json,
                env_json,
                new.idempotency_key,
                new.repro
            ],
        )?;
    let id = tx.last_insert_rowid() as JobId;
    insert_event(tx, now, id, "submitted", &format!("by {}", new.user))?;
    tracking::insert_job_run(tx, id, &new.spec, &new.user, new.repro.as_deref(), now)?;
    Ok(id)
}

fn back_in_queue(tx: &Transaction<'_>, job: JobId) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE jobs SET gpus = '[]', started_at = NULL WHERE id = ?1",
        [job],
    )?;
    Ok(())
}

fn end_queued_in(
    tx: &Transaction<'_>,
    ends: &[(JobId, JobState, String)],
    now: Millis,
) -> rusqlite::Result<()> {
    for (id, state, reason) in ends {
        tx.execute(
            "UPDATE jobs SET state = ?2, reason = ?3, ended_at = ?4 WHERE id = ?1 AND state = 'queued'",
            params![id, state.as_str(), reason, now],
        )?;
        insert_event(tx, now, *id, state.as_str(), reason)?;
    }
    Ok(())
}

fn insert_event(
    tx: &Transaction<'_>,
    at: Millis,
    job: JobId,
    kind: &str,
    detail: &str,
) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT INTO events (at, job_id, kind, detail) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![at, job, kind, detail])?;
    Ok(())
}

fn priority_rank(p: Priority) -> i64 {
    match p {
        Priority::Low => 0,
        Priority::Normal => 1,
        Priority::High => 2,
    }
}

fn read_job(r: &Row<'_>) -> rusqlite::Result<Result<Job>> {
    let id: JobId = r.get(0)?;
    let corrupt = |why: String| StoreError::Corrupt { id, why };
    let state: String = r.get(4)?;
    let gpus: String = r.get(7)?;
    let spec: String = r.get(18)?;
    let parsed = (|| {
        Ok(Job {
            id,
            name: r.get(1)?,
            user: r.get(2)?,
            project: r.get(3)?,
            state: state
                .parse()
                .map_err(|_| corrupt(format!("state {state:?}")))?,
            priority: match r.get::<_, i64>(5)? {
                0 => Priority::Low,
                2 => Priority::High,
                _ => Priority::Normal,
            },
            gpus_requested: r.get(6)?,
            gpus: serde_json::from_str(&gpus).map_err(|e| corrupt(e.to_string()))?,
            node: r.get(8)?,
            command: r.get(9)?,
            cwd: r.get(10)?,
            attempt: r.get(11)?,
            exit_code: r.get(12)?,
            signal: r.get(13)?,
            reason: r.get(14)?,
            submitted_at: r.get(15)?,
            started_at: r.get(16)?,
            ended_at: r.get(17)?,
            spec: serde_json::from_str(&spec).map_err(|e| corrupt(e.to_string()))?,
            failures: r.get(19)?,
            held_by: r.get(20)?,
            eligible_at: r.get(21)?,
            cost: r.get::<_, Option<i64>>(22)?.map(Micros),
            array_id: r.get(23)?,
            array_index: r.get(24)?,
            array_limit: r.get(25)?,
            host_usage: None,
        })
    })();
    match parsed {
        Err(StoreError::Sqlite(e)) => Err(e),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests;
