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
        self.root.join(exit_record_name(attempt))
    }
    /// The job's process group id, written by the supervisor after the spawn.
    pub fn pgid_file(&self, attempt: u32) -> PathBuf {
        self.root.join(pgid_file_name(attempt))
    }
    /// Locked by the attempt's supervisor for its whole life, and the carrier of the
    /// job's environment to it (see `LocalExecutor::prepare`).
    pub fn lock_file(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.lock"))
    }
    /// Where the supervisor of an attempt on a terminal (`gpuq shell`) listens
    /// for the daemon (mode 0600, in the daemon's own directory).
    pub fn terminal_socket(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("attempt-{attempt}.tty"))
    }
    /// A notebook's private directory: JupyterLab's socket lives here, in a
    /// directory only the job's user can enter.
    pub fn session_dir(&self) -> PathBuf {
        self.root.join("session")
    }
    /// Requests from gpuq to the running job (`gpuq profile`): the daemon's
    /// directory, readable by the job; the job answers in its outputs.
    pub fn control_dir(&self) -> PathBuf {
        self.root.join("control")
    }
    /// gpuq's settings for a notebook's JupyterLab (its `JUPYTER_CONFIG_PATH`):
    /// the daemon's, readable by the job, with no secret in them.
    pub fn jupyter_config_dir(&self) -> PathBuf {
        self.control_dir().join("jupyter")
    }
    /// The last `max` bytes of an attempt's log, for classifying failures.
    pub fn log_tail(&self, attempt: u32, max: u64) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(self.log(attempt)) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
        let mut buf = Vec::new();
        let _ = f.take(max).read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
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

pub fn exit_record_name(attempt: u32) -> String {
    format!("attempt-{attempt}.exit")
}

pub fn pgid_file_name(attempt: u32) -> String {
    format!("attempt-{attempt}.pgid")
}

/// Where a notebook's JupyterLab learns its base URL: the URL holds the
/// notebook's capability (a secret), so it travels in the environment, which
/// only the job's user can read, never on a command line, which `ps` shows
/// to every account.
pub const NOTEBOOK_BASE_URL_ENV: &str = "GPUQ_NOTEBOOK_BASE_URL";
/// The file in [`JobDir::jupyter_config_dir`] that JupyterLab reads.
pub const JUPYTER_CONFIG_FILE: &str = "jupyter_server_config.py";
/// Its contents: the same for every notebook (nothing secret in it).
pub const JUPYTER_CONFIG: &str = r#"# Written by gpuq for a notebook job. The notebook's address holds a secret
# (its capability), so it comes in the environment, never on a command line,
# and JupyterLab's log (which its admins may read) shows it as "…".
import logging
import os

_base = os.environ["GPUQ_NOTEBOOK_BASE_URL"]
_secret = [part for part in _base.split("/") if part][-1]
c.ServerApp.base_url = _base
_make_record = logging.getLogRecordFactory()


def _hide_secret(*args, **kwargs):
    record = _make_record(*args, **kwargs)
    try:
        text = record.getMessage()
    except Exception:
        return record
    if _secret in text:
        record.msg, record.args = text.replace(_secret, "…"), None
    return record


logging.setLogRecordFactory(_hide_secret)
"#;

/// Writes `contents` to `path` through a new temporary file and a rename, so a
/// reader sees the old file or the whole new one, never half of it; a link at
/// either name is replaced, never followed.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    crate::safe_fs::Dir::open(parent)?.write_atomically(name, contents)
}
