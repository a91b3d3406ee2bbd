//! `GET /v1/envs`: the cached Python environments.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One cached environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnvView {
    /// Its key: a hash of its inputs (requirements or lock, Python version,
    /// platform, setup, and its owner unless the cache is lab-wide).
    pub key: String,
    /// `building`, `ready` or `failed`.
    pub state: String,
    /// Who asked for it first (its files are this user's).
    pub user: String,
    /// What it is built from (`requirements.txt, Python 3.12`).
    pub source: String,
    /// The interpreter's version, once built.
    pub python: Option<String>,
    /// The installed packages (`name==version`), once built.
    pub packages: Vec<String>,
    pub size_bytes: u64,
    /// Builds started for this key.
    pub builds: u32,
    /// Why the last build failed.
    pub error: Option<String>,
    pub created_at: i64,
    pub built_at: Option<i64>,
    pub last_used_at: i64,
    /// Queued and running jobs that need it (it is never evicted while any do).
    pub jobs: Vec<u64>,
    /// Its directory (`VIRTUAL_ENV` of its jobs).
    pub path: String,
}
