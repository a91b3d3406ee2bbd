//! The seam between the daemon's service and what runs jobs. The service holds
//! one `Arc<dyn Backend>` and never asks which one it is: the local executor
//! ([`crate::LocalBackend`]) and Slurm ([`crate::SlurmCluster`]) both launch
//! attempts, take the stop protocol's signals, report starts and ends as
//! [`AttemptEvent`]s, describe their nodes, and re-attach after a restart.

use crate::{ExitRecord, RunAs};
use gpuq_core::{JobId, JobSpec, Millis, Node, Placement};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a backend offers the scheduler core.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// What users call it, in messages ("Slurm").
    pub name: String,
    /// The nodes jobs are placed on (the core's view).
    pub nodes: Vec<Node>,
    /// Launched attempts may wait in a queue of the backend's own: their clock
    /// (run time, price, time limit) starts with [`AttemptEvent::Started`], not
    /// at the launch.
    pub queues_launches: bool,
    /// Interactive sessions (notebooks, shells) can run here: the daemon reaches
    /// a job's sockets in its job directory (a job on another node it cannot).
    pub interactive: bool,
    /// One line for the log and `gpuq gpus`: what runs jobs and where.
    pub summary: String,
}

/// Everything a backend needs to start one attempt (owned: backends launch off
/// the caller's thread).
#[derive(Debug, Clone)]
pub struct Launch {
    pub job: JobId,
    pub attempt: u32,
    /// Where the core placed the attempt: GPUs per node, in rank order.
    pub placement: Placement,
    pub argv: Vec<String>,
    pub cwd: String,
    /// The submitter's environment with the spec's overrides.
    pub env: BTreeMap<String, String>,
    pub spec: Arc<JobSpec>,
    /// The cores and memory it holds on each node: the spec's own, else the
    /// daemon's defaults (`gpuq_core::effective`). Zero: none reserved.
    pub resources: gpuq_core::JobResources,
    /// The memory limit it runs under (MiB; `gpuq_core::memory_limit_mib`):
    /// its reserved memory, else a cap that reserves nothing. 0: none of its own.
    pub memory_limit_mib: u64,
    /// Run the job as this account; `None`: as the daemon's user.
    pub run_as: Option<RunAs>,
    /// A group that may read the job's checkpoints and outputs.
    pub share_gid: Option<u32>,
}

impl Launch {
    /// The GPUs on the attempt's first node (the only one on a one-node backend).
    pub fn first_node_gpus(&self) -> &[u32] {
        self.placement.0.first().map_or(&[], |p| p.gpus.as_slice())
    }
}

/// How an attempt ended when the job did not end it itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutsideEnd {
    /// The backend's own time limit stopped it.
    TimeLimit(String),
    /// Someone outside gpuq cancelled it (the text says who).
    Cancelled(String),
    /// The backend lost it (node failure, its own preemption): not the job's
    /// fault, so it runs again.
    Lost(String),
}

/// What a backend tells the service about its attempts, in order.
#[derive(Debug, Clone)]
pub enum AttemptEvent {
    /// The backend took the attempt and named it (commit it for re-attach).
    Accepted {
        job: JobId,
        attempt: u32,
        backend_id: u64,
    },
    /// A queued launch began to run (only from backends that queue launches).
    Started {
        job: JobId,
        attempt: u32,
        at: Millis,
        place: String,
    },
    /// The attempt is over. `record`: its status as its process left it (`None`:
    /// it died without one).
    Ended {
        job: JobId,
        attempt: u32,
        record: Option<ExitRecord>,
        outside: Option<OutsideEnd>,
    },
    /// Something the backend shows changed (a pending reason): wake watchers.
    Changed,
}

/// Where a backend sends its events; called from any thread. The service applies
/// an event before the call returns: never call it while holding a lock that a
/// call into the backend takes.
pub type EventSink = Arc<dyn Fn(AttemptEvent) + Send + Sync>;

/// What the store remembers of an attempt that was running when the daemon stopped.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub job: JobId,
    pub attempt: u32,
    /// The backend's id for it, if one was committed.
    pub backend_id: Option<u64>,
    /// The machine rebooted since the last daemon ran.
    pub rebooted: bool,
    /// The attempt had begun to run (its start is recorded).
    pub began: bool,
}

/// What became of such an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Reattached {
    /// Still there: watched again; its end comes as an event.
    Running,
    /// It ended while no daemon ran (`None`: it died without a record).
    Ended(Option<ExitRecord>),
    /// It never ran, or its node went away: requeue it, for this reason.
    Vanished(String),
    /// The backend never got it: launch the same attempt again.
    NeverLaunched,
}

/// A backend: the local executor, Slurm, or anything else that runs attempts.
pub trait Backend: Send + Sync {
    /// Its nodes and how launches behave.
    fn info(&self) -> &BackendInfo;
    /// Starts watching and reporting (poll loops, reapers). Called once, before
    /// any launch or re-attach.
    fn start(&self, events: EventSink);
    /// Starts an attempt. Err: it could not be started (the attempt fails with
    /// this reason). Ok: under way; its start (if queued) and end come as events.
    fn launch(&self, launch: Launch) -> Result<(), String>;
    /// Delivers one signal of the stop protocol to the attempt's processes.
    /// False: it cannot take it yet (not started, or its process group not yet
    /// recorded); the caller tries again while the attempt runs.
    fn signal(&self, job: JobId, attempt: u32, signal: i32) -> bool;
    /// After a daemon restart: finds an attempt the store records as running.
    fn reattach(&self, recorded: &Recorded) -> Reattached;
    /// The backend's own words on an attempt it holds (a pending reason, where
    /// it runs), for `explain`, `ls` and `show`.
    fn status(&self, job: JobId) -> Option<String>;
}

/// Milliseconds since the epoch (backends stamp the ends they synthesise).
pub(crate) fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
