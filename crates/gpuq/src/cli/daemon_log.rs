//! The daemon's log: always `$GPUQ_HOME/daemon.log` (renamed to `daemon.log.1`
//! beyond a size, so it stays bounded), and stderr too only when asked
//! (`gpuq server --foreground`): a daemon started with `&` must not write
//! into the shell it was started from.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A log file rotated once beyond `max` bytes (one older generation kept).
pub struct LogFile {
    path: PathBuf,
    max: u64,
    open: Mutex<Open>,
}

struct Open {
    file: File,
    len: u64,
}

impl LogFile {
    pub fn open(path: &Path, max: u64) -> std::io::Result<Self> {
        let file = open_append(path)?;
        let len = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            max: max.max(4096),
            open: Mutex::new(Open { file, len }),
        })
    }

    fn append(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len > 0 && open.len + buf.len() as u64 > self.max {
            // A failed rotation keeps writing to the old file rather than losing lines.
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            if std::fs::rename(&self.path, &rotated).is_ok() {
                if let Ok(file) = open_append(&self.path) {
                    *open = Open { file, len: 0 };
                }
            }
        }
        open.file.write_all(buf)?;
        open.len += buf.len() as u64;
        Ok(())
    }
}

/// Appends, never through a link, and keeps it private (the log names users,
/// jobs and paths): one made readable by an older gpuq or by hand is made
/// private again, not only a new one.
pub(crate) fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::PermissionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if file.metadata()?.permissions().mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

pub struct LogWriter<'a>(&'a LogFile);

impl Write for LogWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = LogWriter<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        LogWriter(self)
    }
}

/// Logs to `path` (bounded by `max` bytes), and to stderr too when `echo`.
pub fn init(path: &Path, max: u64, echo: bool) -> std::io::Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("GPUQ_LOG").unwrap_or_else(|_| "info".into());
    let file = tracing_subscriber::fmt::layer()
        .with_writer(LogFile::open(path, max)?)
        .with_target(false)
        .with_ansi(false);
    let terminal = echo.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
    });
    // A second init (a test's) keeps the first subscriber: nothing to report.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(file)
        .with(terminal)
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_rotated_beyond_its_size_and_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let log = LogFile::open(&path, 4096).unwrap();
        let line = [b'x'; 100];
        for _ in 0..200 {
            LogWriter(&log).write_all(&line).unwrap();
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("daemon.log.1"))
            .unwrap()
            .len();
        assert!(now <= 4096 && old <= 4096, "{now} {old}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
