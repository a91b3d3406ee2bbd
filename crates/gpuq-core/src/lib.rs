//! The pure domain of gpuq: job specs, job states, the scheduler, and the
//! telemetry figures and detectors.
//!
//! Nothing in this crate does IO, spawns a process or reads the clock: every
//! function that needs the time takes `now` as an argument. The daemon and the
//! simulator call the very same functions, so a figure from the simulator is a
//! figure of the shipped scheduler.

pub mod advice;
pub mod alerts;
pub mod array;
pub mod catalog;
pub mod cost;
pub mod cron;
pub mod duration;
pub mod idle;
pub mod job;
pub mod limits;
pub mod memsize;
pub mod pyenv;
pub mod resources;
pub mod scheduler;
pub mod session;
pub mod signal;
pub mod spec;
pub mod spot;
pub mod state;
pub mod sweep;
pub mod telemetry;
pub mod tracking;
pub mod tune;

pub use array::{ArraySpec, JobRef};
pub use duration::DurationSpec;
pub use job::{Attempt, Event, Job};
pub use memsize::MemSize;
pub use resources::{effective, memory_limit_mib, JobResources, ResourceDefaults};
pub use scheduler::{
    explain, schedule, Decision, DependencyState, JobGroup, Node, NodeGpus, NodeKind, NodeShortage,
    PendingJob, Placement, RunningJob, ScheduleInput, WaitReason,
};
pub use signal::EarlySignal;
pub use spec::{JobSpec, Priority, SpecError};
pub use state::JobState;

/// A job's id: assigned by the store, never reused.
pub type JobId = u64;

/// A point in time: milliseconds since the Unix epoch.
pub type Millis = i64;

/// A count and its noun, in the singular for one: "1 GPU", "2 GPUs", "0 GPUs".
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
