//! Connection settings and schema migrations (tracked with `PRAGMA user_version`).

use crate::{Result, StoreError};
use rusqlite::Connection;

/// Schema versions, in order; index + 1 is the version after applying the entry.
pub(crate) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT,
    user           TEXT NOT NULL,
    project        TEXT,
    state          TEXT NOT NULL,
    priority       INTEGER NOT NULL,
    gpus_requested INTEGER NOT NULL,
    gpus           TEXT NOT NULL,
    node           TEXT,
    command        TEXT NOT NULL,
    cwd            TEXT NOT NULL,
    attempt        INTEGER NOT NULL,
    failures       INTEGER NOT NULL DEFAULT 0,
    held_by        TEXT,
    eligible_at    INTEGER,
    idempotency_key TEXT,
    exit_code      INTEGER,
    signal         INTEGER,
    reason         TEXT,
    submitted_at   INTEGER NOT NULL,
    started_at     INTEGER,
    ended_at       INTEGER,
    spec           TEXT NOT NULL,
    env            TEXT NOT NULL
);
CREATE INDEX jobs_active ON jobs (state) WHERE state IN ('queued', 'running', 'preempted');
CREATE UNIQUE INDEX jobs_idempotency ON jobs (user, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE attempts (
    job_id     INTEGER NOT NULL REFERENCES jobs (id),
    attempt    INTEGER NOT NULL,
    node       TEXT NOT NULL,
    gpus       TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    exit_code  INTEGER,
    signal     INTEGER,
    reason     TEXT,
    stop       TEXT,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE events (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    job_id INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX events_job ON events (job_id);
"#,
    r#"
CREATE TABLE tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user       TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
"#,
    r#"
ALTER TABLE attempts ADD COLUMN gpu_usage TEXT;
CREATE TABLE alerts (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    job_id  INTEGER,
    user    TEXT,
    gpu     INTEGER,
    message TEXT NOT NULL
);
"#,
    r#"
ALTER TABLE attempts ADD COLUMN rate_micros INTEGER;
ALTER TABLE jobs ADD COLUMN cost_micros INTEGER;
"#,
    r#"
ALTER TABLE attempts ADD COLUMN slurm_job_id INTEGER;
"#,
    // Experiment tracking (the MLflow-compatible API). Every job is a run (its id
    // is the job's number); runs made through the API get random hex ids.
    // A metric value of NULL is NaN (SQLite stores NaN as NULL).
    r#"
CREATE TABLE experiments (
    id                INTEGER PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    artifact_location TEXT NOT NULL,
    lifecycle_stage   TEXT NOT NULL DEFAULT 'active',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    -- Who made it through the API; NULL for Default and projects' (admins manage those).
    owner             TEXT
);
INSERT INTO experiments (id, name, artifact_location, created_at, updated_at)
    VALUES (0, 'Default', 'mlflow-artifacts:/0', 0, 0);
CREATE TABLE experiment_tags (
    experiment_id INTEGER NOT NULL REFERENCES experiments (id),
    key           TEXT NOT NULL,
    value         TEXT NOT NULL,
    PRIMARY KEY (experiment_id, key)
) WITHOUT ROWID;
CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    experiment_id   INTEGER NOT NULL REFERENCES experiments (id),
    job_id          INTEGER UNIQUE REFERENCES jobs (id),
    name            TEXT,
    user            TEXT NOT NULL,
    status          TEXT NOT NULL,
    start_time      INTEGER,
    end_time        INTEGER,
    lifecycle_stage TEXT NOT NULL DEFAULT 'active',
    created_at      INTEGER NOT NULL
);
CREATE INDEX runs_experiment ON runs (experiment_id);
CREATE TABLE run_params (
    run_id TEXT NOT NULL REFERENCES runs (id),
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE run_tags (
    run_id TEXT NOT NULL REFERENCES runs (id),
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE metric_series (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs (id),
    key         TEXT NOT NULL,
    count       INTEGER NOT NULL,
    last_step   INTEGER NOT NULL,
    last_time   INTEGER NOT NULL,
    last_value  REAL,
    UNIQUE (run_id, key)
);
CREATE TABLE metric_points (
    series INTEGER NOT NULL,
    seq    INTEGER NOT NULL,
    step   INTEGER NOT NULL,
    time   INTEGER NOT NULL,
    value  REAL,
    PRIMARY KEY (series, seq)
) WITHOUT ROWID;
CREATE TABLE metric_rollups (
    series    INTEGER NOT NULL,
    bucket    INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    first_step INTEGER NOT NULL,
    last_step  INTEGER NOT NULL,
    min_value REAL,
    min_step  INTEGER,
    min_time  INTEGER,
    max_value REAL,
    max_step  INTEGER,
    max_time  INTEGER,
    PRIMARY KEY (series, bucket)
) WITHOUT ROWID;
CREATE TABLE metric_files (
    job_id INTEGER PRIMARY KEY REFERENCES jobs (id),
    offset INTEGER NOT NULL
);
ALTER TABLE jobs ADD COLUMN repro TEXT;
ALTER TABLE attempts ADD COLUMN runtime TEXT;
INSERT OR IGNORE INTO experiments (name, artifact_location, created_at, updated_at)
    SELECT DISTINCT project, '', submitted_at, submitted_at FROM jobs WHERE project IS NOT NULL GROUP BY project;
UPDATE experiments SET artifact_location = 'mlflow-artifacts:/' || id WHERE artifact_location = '';
INSERT INTO runs (id, experiment_id, job_id, name, user, status, start_time, end_time, created_at)
    SELECT CAST(j.id AS TEXT), COALESCE(e.id, 0), j.id, j.name, j.user, 'SCHEDULED', j.started_at, j.ended_at, j.submitted_at
    FROM jobs j LEFT JOIN experiments e ON e.name = j.project;
"#,
    // Sweeps and job arrays. A trial is an ordinary job linked by `trials`; the
    // searcher's whole state is one JSON value, replaced in the same transaction
    // as the jobs its decisions submit, so a killed daemon neither loses nor
    // repeats a trial. An array's tasks are jobs sharing `array_id` (the first
    // task's id); `array_limit` is how many of them may run at once.
    r#"
CREATE TABLE sweeps (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    user       TEXT NOT NULL,
    project    TEXT,
    state      TEXT NOT NULL,
    reason     TEXT,
    created_at INTEGER NOT NULL,
    ended_at   INTEGER,
    file       TEXT NOT NULL,
    seed       INTEGER NOT NULL,
    searcher   TEXT NOT NULL,
    run_id     TEXT
);
CREATE TABLE trials (
    sweep_id INTEGER NOT NULL REFERENCES sweeps (id),
    trial    INTEGER NOT NULL,
    job_id   INTEGER NOT NULL UNIQUE REFERENCES jobs (id),
    max_step INTEGER NOT NULL,
    PRIMARY KEY (sweep_id, trial)
);
ALTER TABLE jobs ADD COLUMN array_id INTEGER;
ALTER TABLE jobs ADD COLUMN array_index INTEGER;
ALTER TABLE jobs ADD COLUMN array_limit INTEGER;
CREATE INDEX jobs_array ON jobs (array_id, array_index) WHERE array_id IS NOT NULL;
"#,
    // The dashboard's logins. Only hashes of the secrets are kept: a login link's
    // code (single use, minutes) and a browser session's id. A session made with
    // a per-user API token names it, and dies with its revocation (as does one
    // made from a link that such a token asked for).
    r#"
CREATE TABLE web_links (
    code_hash  BLOB PRIMARY KEY,
    user       TEXT NOT NULL,
    token_id   INTEGER REFERENCES tokens (id),
    expires_at INTEGER NOT NULL
);
CREATE TABLE web_sessions (
    id_hash    BLOB PRIMARY KEY,
    user       TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    token_id   INTEGER REFERENCES tokens (id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
"#,
    // Cached Python environments (issue 19): one row per key. `state` is
    // `building`, `ready` or `failed`; only a `ready` row's directory is ever
    // used, so a build cut short (a killed daemon or builder) is never run in.
    r#"
CREATE TABLE envs (
    key          TEXT PRIMARY KEY,
    user         TEXT NOT NULL,
    uid          INTEGER,
    state        TEXT NOT NULL,
    source       TEXT NOT NULL,
    python       TEXT,
    packages     TEXT,
    size_bytes   INTEGER NOT NULL DEFAULT 0,
    builds       INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    created_at   INTEGER NOT NULL,
    built_at     INTEGER,
    last_used_at INTEGER NOT NULL
);
"#,
    // Points a run's writer had dropped (over a rate, a cap, the disk reserve),
    // per reason: counted so readers are told, never stored themselves.
    r#"
CREATE TABLE metric_drops (
    run_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (run_id, reason)
) WITHOUT ROWID;
"#,
    // What an attempt's cgroup counted (peak and limit of memory, CPU time,
    // an OOM kill, its cores: `gpuq_core::job::HostUsage` as JSON), written
    // with its end. A column of its own beside `gpu_usage`, which it mirrors
    // (figures of the attempt's end, read with the attempt, never searched in
    // SQL), rather than inside `runtime`: that is the record of what the
    // attempt ran on, written at its start and shown to reproduce it.
    r#"
ALTER TABLE attempts ADD COLUMN host_usage TEXT;
"#,
];

/// WAL for concurrent readers and cheap commits; synchronous=NORMAL: a commit is
/// in the WAL (OS page cache) before it returns, so a killed daemon loses nothing;
/// only an OS crash or power loss can roll back the last commits, never corrupt.
pub(crate) fn configure(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

pub(crate) fn migrate(conn: &Connection) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::TooNew {
            found: version,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        conn.execute_batch(&format!(
            "BEGIN; {sql}; PRAGMA user_version = {}; COMMIT;",
            i + 1
        ))?;
    }
    Ok(())
}
