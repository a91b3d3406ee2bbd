//! The daemon's own settings (`gpus`, `listen`, `slots`) and where each came
//! from: a `gpuq server` flag, else `gpuq.toml`, else (for a daemon a command
//! started because none answered) what the home's last daemon ran with, kept
//! in `$GPUQ_HOME/daemon.settings`. So a daemon killed and autostarted again
//! still has the simulated GPUs its jobs hold.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// What a daemon ran with, as `daemon.settings` keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub gpus: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
}

pub fn path(home: &Path) -> PathBuf {
    home.join("daemon.settings")
}

/// The home's last daemon's settings; `None` when there are none (or unreadable).
pub fn read(home: &Path) -> Option<Settings> {
    let bytes = std::fs::read(path(home)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes them atomically, readable by the daemon's user alone.
pub fn write(home: &Path, settings: &Settings) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = path(home);
    let tmp = home.join("daemon.settings.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(settings).map_err(std::io::Error::other)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &target)
}

/// Where a setting's value came from, in the daemon's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Config,
    LastDaemon,
    Default,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Config => "gpuq.toml",
            Source::LastDaemon => "the last daemon's daemon.settings",
            Source::Default => "default",
        }
    }
}

/// The first of flag, config and last daemon that has a value.
pub fn pick<T>(flag: Option<T>, config: Option<T>, last: Option<T>) -> (Option<T>, Source) {
    match (flag, config, last) {
        (Some(v), _, _) => (Some(v), Source::Flag),
        (None, Some(v), _) => (Some(v), Source::Config),
        (None, None, Some(v)) => (Some(v), Source::LastDaemon),
        (None, None, None) => (None, Source::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_wins_then_the_config_then_the_last_daemon() {
        assert_eq!(pick(Some(1), Some(2), Some(3)), (Some(1), Source::Flag));
        assert_eq!(pick(None, Some(2), Some(3)), (Some(2), Source::Config));
        assert_eq!(pick(None, None, Some(3)), (Some(3), Source::LastDaemon));
        assert_eq!(pick::<u32>(None, None, None), (None, Source::Default));
    }

    #[test]
    fn settings_round_trip_privately() {
        let home = tempfile::tempdir().unwrap();
        let s = Settings {
            gpus: "sim:4".into(),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            slots: None,
        };
        write(home.path(), &s).unwrap();
        write(home.path(), &s).unwrap();
        assert_eq!(read(home.path()), Some(s));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(home.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
