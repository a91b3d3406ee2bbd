//! What an attempt's cgroup counted, carried in its exit record: whether the
//! kernel's OOM killer acted inside the job's memory limit, the peak memory,
//! the limit itself and the CPU time. Read from the cgroup's own counters
//! (v1 `memory.oom_control`/`memory.max_usage_in_bytes`/`cpuacct.usage`, v2
//! `memory.events`/`memory.peak`/`cpu.stat`), never guessed from the log.

use serde::{Deserialize, Serialize};

/// A job's use of memory and CPU as its cgroup counted it. Every figure is
/// optional: a controller the host does not give (or a kernel too old for
/// `memory.peak`) leaves it unknown, which is not zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupUsage {
    /// The kernel killed a process of the job for exceeding its memory limit
    /// (`oom_kill` > 0 and the job's own limit was hit), whichever process it was.
    #[serde(default)]
    pub oom_killed: bool,
    /// The OOM killer killed a process of the job although the job's own
    /// limit was never hit: the node, or all jobs together (their common
    /// limit), ran out of memory. Not the job's fault.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_oom_killed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// User plus system CPU time of every process of the job, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Cores of its cpuset; `None`: no cpuset of its own (it shared the
    /// cores no job reserved). With the CPU time, how busy its cores were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
}

// An exit record is compared whole (tests, re-attach); a CPU time is never NaN
// (it is read from an integer counter), so equality is reflexive.
impl Eq for CgroupUsage {}
