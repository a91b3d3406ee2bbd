//! Cached Python environments (migration 9): what the daemon knows of each
//! key's build. The directories are the builder's; the rows say which of them
//! may be used (`ready`), which are being built, and which failed and why.

use super::{Result, Store};
use gpuq_core::Millis;
use rusqlite::{params, OptionalExtension, Row};

pub const ENV_BUILDING: &str = "building";
pub const ENV_READY: &str = "ready";
pub const ENV_FAILED: &str = "failed";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRow {
    pub key: String,
    /// Who asked for it first (its builder).
    pub user: String,
    /// The account that owns its files (`None`: the daemon's).
    pub uid: Option<u32>,
    pub state: String,
    /// What it is built from, in words (`requirements.txt`, `project .`).
    pub source: String,
    /// The interpreter's version, once built.
    pub python: Option<String>,
    /// `name==version` lines, once built.
    pub packages: Vec<String>,
    pub size_bytes: u64,
    /// How many builds were started for this key (a retry after a failure or a crash adds one).
    pub builds: u32,
    pub error: Option<String>,
    pub created_at: Millis,
    pub built_at: Option<Millis>,
    pub last_used_at: Millis,
}

/// What a finished build reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvBuilt {
    Ready {
        python: String,
        packages: Vec<String>,
        size_bytes: u64,
    },
    Failed(String),
}

fn env_row(r: &Row<'_>) -> rusqlite::Result<EnvRow> {
    let packages: Option<String> = r.get(6)?;
    Ok(EnvRow {
        key: r.get(0)?,
        user: r.get(1)?,
        uid: r.get(2)?,
        state: r.get(3)?,
        source: r.get(4)?,
        python: r.get(5)?,
        packages: packages
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default(),
        size_bytes: r.get::<_, i64>(7)?.max(0) as u64,
        builds: r.get(8)?,
        error: r.get(9)?,
        created_at: r.get(10)?,
        built_at: r.get(11)?,
        last_used_at: r.get(12)?,
    })
}

const COLUMNS: &str = "key, user, uid, state, source, python, packages, size_bytes, builds, error, created_at, built_at, last_used_at";

impl Store {
    pub fn env(&self, key: &str) -> Result<Option<EnvRow>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM envs WHERE key = ?1"),
                [key],
                env_row,
            )
            .optional()?)
    }

    /// Every cached environment, most recently used first.
    pub fn envs(&self) -> Result<Vec<EnvRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM envs ORDER BY last_used_at DESC, key"
        ))?;
        let rows = stmt.query_map([], env_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records that a build of `key` starts (a new row, or a failed or
    /// interrupted one built again): its state is `building` until it ends.
    pub fn begin_env_build(
        &mut self,
        key: &str,
        user: &str,
        uid: Option<u32>,
        source: &str,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO envs (key, user, uid, state, source, builds, created_at, last_used_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6)
                 ON CONFLICT (key) DO UPDATE SET state = ?4, builds = builds + 1, error = NULL,
                     user = ?2, uid = ?3, last_used_at = ?6",
                params![key, user, uid, super::envs::ENV_BUILDING, source, now],
            )?;
            Ok(())
        })
    }

    /// Records how a build ended.
    pub fn finish_env_build(&mut self, key: &str, built: &EnvBuilt, now: Millis) -> Result<()> {
        self.write(|tx| {
            match built {
                EnvBuilt::Ready {
                    python,
                    packages,
                    size_bytes,
                } => tx.execute(
                    "UPDATE envs SET state = ?2, python = ?3, packages = ?4, size_bytes = ?5,
                         error = NULL, built_at = ?6, last_used_at = ?6 WHERE key = ?1",
                    params![
                        key,
                        ENV_READY,
                        python,
                        serde_json::to_string(packages).unwrap_or_default(),
                        (*size_bytes).min(i64::MAX as u64) as i64,
                        now
                    ],
                )?,
                EnvBuilt::Failed(why) => tx.execute(
                    "UPDATE envs SET state = ?2, error = ?3, size_bytes = 0 WHERE key = ?1",
                    params![key, ENV_FAILED, why],
                )?,
            };
            Ok(())
        })
    }

    /// A job started in it.
    pub fn touch_env(&mut self, key: &str, now: Millis) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE envs SET last_used_at = MAX(last_used_at, ?2) WHERE key = ?1",
                params![key, now],
            )?;
            Ok(())
        })
    }

    /// Forgets an environment (evicted, or its interrupted build cleared away).
    pub fn remove_env(&mut self, key: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute("DELETE FROM envs WHERE key = ?1", [key])?;
            Ok(())
        })
    }
}
