//! The backends the contract suite runs against: how to start a daemon for
//! each, and how long its jobs may take to start, to be stopped and to have
//! their end recorded. The tests' assertions are the same for all; only these
//! figures differ.

use crate::common::{eventually, Daemon};
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
};
