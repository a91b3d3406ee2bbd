//! Backends that run jobs, behind one trait (`backend.rs`): Slurm
//! (`slurm.rs` its commands, `slurm_cluster.rs` the backend), and the local executor, which starts each attempt
//! under a small supervisor process (`gpuq __supervise`) that owns the job's
//! process group and records its exit status on disk, so a job outlives a
//! daemon restart and its end is never missed.

pub mod backend;
pub mod cgroup;
pub mod container;
pub mod envbuild;
pub mod envseal;
pub mod layout;
pub mod local;
mod local_backend;
pub mod log_pipe;
pub mod pty;
pub mod safe_fs;
pub mod slurm;
pub mod slurm_cluster;
pub mod supervisor;
pub mod terminal;
mod usage;

pub use backend::{
    AttemptEvent, Backend, BackendInfo, EventSink, Launch, OutsideEnd, Reattached, Recorded,
};
pub use layout::JobDir;
pub use local::{AttemptLimits, GpuDevice, LaunchRequest, LocalExecutor};
pub use local_backend::LocalBackend;
pub use slurm_cluster::SlurmCluster;
pub use supervisor::{supervise, Credentials, ExitRecord, Supervision};
pub use usage::CgroupUsage;

/// The local account a job runs as, when the daemon runs as root for several users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    pub home: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot prepare job directory {path}: {source}")]
    JobDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot signal job: {0}")]
    Signal(std::io::Error),
    /// Confinement is in force and the attempt's groups could not be made.
    #[error("cannot make the job's cgroup: {0}")]
    Confine(#[from] cgroup::CgroupError),
    #[error("GPU {0} has no known device minor number, so the job's cgroup cannot allow it")]
    NoMinor(u32),
}
