//! The backends the contract suite runs against: how to start a daemon for
//! each, and how long its jobs may take to start, to be stopped and to have
//! their end recorded. The tests' assertions are the same for all; only these
//! figures differ.

use crate::common::{eventually, Daemon};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

pub struct Backend {
    pub name: &'static str,
    start: fn() -> Daemon,
    /// From a submit to the job's first line in its log.
    pub start_within: Duration,
    /// From a job's end to gpuq recording it (Slurm: a poll, then sacct).
    pub end_within: Duration,
    /// How much later than the end of the grace period SIGKILL may land.
    pub kill_slack: Duration,
    /// How far a signal's arrival may be off the time it is due, in seconds of
    /// the job's own clock (Slurm: gpuq's clock starts when a poll sees the job run).
    pub clock_slack: f64,
    /// A grace period longer than any delay of the backend's own before its
    /// SIGKILL (Slurm: KillWait), so that a SIGKILL that is not gpuq's shows.
    pub long_grace_s: u64,
    /// The daemon has seen the job run (Slurm: a poll found it RUNNING), which
    /// may be later than the job's first line in its log.
    seen_running: fn(&Daemon, u64) -> bool,
    /// How the backend confines its jobs (contract/confinement.rs), if it does.
    #[cfg_attr(
        not(any(feature = "slurm-tests", feature = "system-tests")),
        allow(dead_code)
    )]
    confined: Option<Confined>,
}

/// What the confinement tests need of a backend that confines its jobs.
/// (Without a confining backend in the build, nothing reads it.)
#[cfg_attr(
    not(any(feature = "slurm-tests", feature = "system-tests")),
    allow(dead_code)
)]
#[derive(Clone, Copy)]
pub struct Confined {
    /// The stand-in GPUs' device nodes, as the backend's jobs see them.
    pub devices: fn() -> DeviceNodes,
    /// The GPUs (device minor numbers) an ended job was given, from its
    /// `show` and its log (where it printed SLURM_JOB_GPUS).
    pub own_gpus: fn(&Value, &str) -> Vec<u32>,
}

/// A directory of stand-in GPU device nodes: nvidiaN (195:N) and nvidiactl
/// (195:255), which open() finds ENXIO where allowed and EPERM where a devices
/// cgroup denies them.
#[cfg_attr(
    not(any(feature = "slurm-tests", feature = "system-tests")),
    allow(dead_code)
)]
pub struct DeviceNodes {
    pub dir: PathBuf,
    /// Set when this process mounted the directory (unmounted on drop).
    _mount: Option<tempfile::TempDir>,
}

impl DeviceNodes {
    /// Mounts a tmpfs (without nodev: the nodes must open) holding `gpus`
    /// stand-in GPUs and nvidiactl. Needs root.
    #[allow(dead_code)] // only the confined local backends mount their own
    pub fn mount(gpus: u32) -> Self {
        use std::os::unix::fs::PermissionsExt;
        use std::process::Command;
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("dev");
        std::fs::create_dir(&dir).unwrap();
        // Jobs of other users look the nodes up too.
        std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "mode=755,size=64k,nosuid,noexec",
                "gpuq-test-dev",
            ])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            ok.success(),
            "mounting a tmpfs for stand-in GPUs needs root"
        );
        let nodes = DeviceNodes {
            dir,
            _mount: Some(temp),
        };
        let minors = (0..gpus)
            .map(|n| (format!("nvidia{n}"), n))
            .chain([("nvidiactl".to_string(), 255)]);
        for (name, minor) in minors {
            let ok = Command::new("mknod")
                .args(["-m", "666"])
                .arg(nodes.dir.join(name))
                .args(["c", "195", &minor.to_string()])
                .status()
                .unwrap();
            assert!(ok.success(), "mknod of a stand-in GPU");
        }
        nodes
    }

    /// A directory the backend made, named by an environment variable.
    #[allow(dead_code)] // only the Slurm backend names its own
    pub fn from_env(var: &str) -> Self {
        let dir = std::env::var_os(var).unwrap_or_else(|| {
            panic!("{var} is not set: run the Slurm instances through `bash tests/slurm/run`")
        });
        DeviceNodes {
            dir: dir.into(),
            _mount: None,
        }
    }
}

impl Drop for DeviceNodes {
    fn drop(&mut self) {
        if self._mount.is_some() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .status();
        }
    }
}

impl Backend {
    /// A fresh daemon with its own home on this backend.
    pub fn start(&self) -> Daemon {
        (self.start)()
    }

    /// Waits until the daemon has seen the job run (not only the job's first line).
    pub fn wait_seen_running(&self, d: &Daemon, id: u64) {
        assert!(
            eventually(self.start_within, || (self.seen_running)(d, id)),
            "the daemon never saw job {id} run on {}: {}\n{}",
            self.name,
            d.show(id),
            d.daemon_log_tail(40)
        );
    }

    /// How the backend confines its jobs; the confinement tests run only on
    /// backends that do.
    #[cfg_attr(
        not(any(feature = "slurm-tests", feature = "system-tests")),
        allow(dead_code)
    )]
    pub fn confined(&self) -> Confined {
        self.confined
            .unwrap_or_else(|| panic!("the {} backend does not confine its jobs", self.name))
    }

    /// Long enough for a job that runs for `runs` to start, run and be recorded.
    pub fn job_within(&self, runs: Duration) -> Duration {
        self.start_within + runs + self.end_within
    }
}

/// Jobs run here, under `gpuq __supervise`, on four simulated GPUs.
pub const LOCAL: Backend = Backend {
    name: "local",
    start: || Daemon::start("sim:4"),
    // Generous: the tests share a small machine with builds.
    start_within: Duration::from_secs(20),
    end_within: Duration::from_secs(10),
    kill_slack: Duration::from_secs(1),
    clock_slack: 0.8,
    long_grace_s: 2,
    seen_running: |d, id| d.show(id)["state"] == "running",
    confined: None,
};

/// Jobs run here as with [`LOCAL`], each in cgroups of its own, with devices
/// confined through the v1 devices controller (`[confinement] devices = "v1"`).
/// Needs root: the system-tests feature.
#[cfg(feature = "system-tests")]
pub const LOCAL_V1: Backend = Backend {
    name: "local, cgroup v1 devices",
    start: || Daemon::start_with_config("sim:4", "[confinement]\ndevices = \"v1\"\n"),
    confined: Some(LOCAL_CONFINED),
    ..LOCAL
};

/// As [`LOCAL_V1`], with devices confined by the cgroup v2 device program
/// (`[confinement] devices = "bpf"`).
#[cfg(feature = "system-tests")]
pub const LOCAL_BPF: Backend = Backend {
    name: "local, cgroup v2 device program",
    start: || Daemon::start_with_config("sim:4", "[confinement]\ndevices = \"bpf\"\n"),
    confined: Some(LOCAL_CONFINED),
    ..LOCAL
};

/// Simulated GPU i (`--gpus sim:N`) stands for device 195:i, whose node the
/// test makes on a tmpfs of its own.
#[cfg(feature = "system-tests")]
const LOCAL_CONFINED: Confined = Confined {
    devices: || DeviceNodes::mount(4),
    own_gpus: |job, _| {
        let attempt = job["attempts"].as_array().and_then(|a| a.last());
        attempt
            .map(|a| &a["gpus"])
            .unwrap_or(&job["gpus"])
            .as_array()
            .unwrap_or_else(|| panic!("no GPUs in {job}"))
            .iter()
            .map(|g| g.as_u64().expect("a GPU index") as u32)
            .collect()
    },
};

/// Jobs go through the Slurm cluster of `bash tests/slurm/run` (two nodes, two
/// stand-in GPUs each), with the config of tests/slurm.rs.
#[cfg(feature = "slurm-tests")]
pub const SLURM: Backend = Backend {
    name: "slurm",
    start: || {
        assert!(
            std::env::var_os("SLURM_CONF").is_some(),
            "run the Slurm instances through `bash tests/slurm/run`, which starts Slurm"
        );
        Daemon::start_with_config("none", crate::common::SLURM_CONFIG)
    },
    start_within: Duration::from_secs(60),
    // A 300 ms poll; without an exit record, sacct's line comes 1-3 s after the end.
    end_within: Duration::from_secs(30),
    // A poll and an scancel. Slurm's KillWait (5 s in tests/slurm/run) is not
    // allowed for: the contract's SIGKILL comes at the end of --grace.
    kill_slack: Duration::from_secs(2),
    clock_slack: 1.5,
    long_grace_s: 7,
    seen_running: |d, id| {
        d.ok(&["explain", &id.to_string()])
            .contains("Slurm: RUNNING")
    },
    // task/cgroup and proctrack/cgroup with ConstrainDevices; each node's
    // stand-in GPUs are nvidia0 and nvidia1 of its own /dev (tests/slurm/run).
    confined: Some(Confined {
        devices: || DeviceNodes::from_env("GPUQ_SLURM_DEVDIR"),
        // Slurm renumbers CUDA_VISIBLE_DEVICES from 0 under ConstrainDevices;
        // SLURM_JOB_GPUS names the node's own devices.
        own_gpus: |_, log| {
            log.lines()
                .find_map(|l| l.strip_prefix("SLURM_JOB_GPUS="))
                .unwrap_or_else(|| panic!("no SLURM_JOB_GPUS line in the log: {log}"))
                .split(',')
                .filter_map(|g| g.trim().parse().ok())
                .collect()
        },
    }),
};
