//! The on-disk layout of one job: `$GPUQ_HOME/jobs/<id>/`.

use gpuq_core::JobId;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct JobDir {
    root: PathBuf,
}

impl JobDir {
    pub fn new(home: &Path, id: JobId) -> Self {
        Self {
            root: home.join("jobs").join(id.to_string()),
        }
    }
    /// The directory as given to the supervisor on its command line.
    pub fn from_root(root: PathBuf) -> Self {
        Self { root }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn log(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.log"))
    }
    /// Written by the supervisor when the attempt ends (atomically, by rename).
    pub fn exit_record(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.exit"))
    }
    /// The job's process group id, written by the supervisor after the spawn.
    pub fn pgid_file(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.pgid"))
    }
    /// Locked by the attempt's supervisor for its whole life, and the carrier of the
    /// job's environment to it (see `LocalExecutor::prepare`).
    pub fn lock_file(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.lock"))
    }
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    pub fn outputs(&self) -> PathBuf {
        self.root.join("outputs")
    }
    pub fn metrics(&self) -> PathBuf {
        self.root.join("metrics.jsonl")
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, so a reader
/// sees the old file or the whole new one, never half of it.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
