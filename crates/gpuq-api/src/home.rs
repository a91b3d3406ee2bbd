//! The data directory (`GPUQ_HOME`) and the files in it that clients and the
//! daemon share: the API token and the running daemon's address.

use serde::{Deserialize, Serialize};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `$GPUQ_HOME`, else `$XDG_DATA_HOME/gpuq`, else `~/.local/share/gpuq`; always
/// absolute (a relative home would mean another directory to every process
/// that changes its working directory, the supervisor of a job among them).
pub fn resolve_home() -> PathBuf {
    let home = relative_home();
    std::path::absolute(&home).unwrap_or(home)
}

fn relative_home() -> PathBuf {
    if let Some(h) = std::env::var_os("GPUQ_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(x).join("gpuq");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/share/gpuq")
}

pub fn token_path(home: &Path) -> PathBuf {
    home.join("token")
}

pub fn daemon_file(home: &Path) -> PathBuf {
    home.join("daemon.json")
}

/// The daemon's unix socket: local clients are identified by the kernel.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join("gpuq.sock")
}

pub fn daemon_log(home: &Path) -> PathBuf {
    home.join("daemon.log")
}

/// Held (flock, exclusive) by the home's daemon for its whole life.
pub fn daemon_lock(home: &Path) -> PathBuf {
    home.join("daemon.lock")
}

/// True while a daemon holds the home's lock (it may still be starting, or stopping).
pub fn daemon_running(home: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(daemon_lock(home)) else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; a shared lock taken here is dropped with the file.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    !free
}

/// Written by the daemon once it listens; read by clients to find it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonFile {
    pub url: String,
    pub pid: u32,
}

impl DaemonFile {
    pub fn read(home: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(daemon_file(home)).ok()?).ok()
    }
}

/// Reads the token, creating it (random, mode 0600) on first start.
pub fn load_or_create_token(home: &Path) -> std::io::Result<String> {
    let path = token_path(home);
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        std::io::Error::other(format!("cannot get random bytes for the API token: {e}"))
    })?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| annotate(e, &tmp))?;
        f.write_all(token.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| annotate(e, &path))?;
    Ok(token)
}

fn annotate(e: std::io::Error, path: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

pub fn read_token(home: &Path) -> Option<String> {
    if let Ok(t) = std::env::var("GPUQ_TOKEN") {
        if !t.is_empty() {
            return Some(t);
        }
    }
    std::fs::read_to_string(token_path(home))
        .ok()
        .map(|t| t.trim().to_string())
}

/// The name jobs are recorded under.
pub fn current_user() -> String {
    // SAFETY: getpwuid returns a pointer into static storage or null; we copy out at once.
    unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if !pw.is_null() && !(*pw).pw_name.is_null() {
            if let Ok(name) = std::ffi::CStr::from_ptr((*pw).pw_name).to_str() {
                return name.to_string();
            }
        }
    }
    std::env::var("USER").unwrap_or_else(|_| format!("uid{}", unsafe { libc::getuid() }))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
