//! Job states and which transitions are terminal.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The state of a job, as shown by `gpuq ls` and in `--json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for its dependencies or for resources.
    Queued,
    /// An attempt is running.
    Running,
    /// Exited with status 0.
    Succeeded,
    /// Exited non-zero, was killed, hit its time limit, or a dependency failed.
    Failed,
    /// Cancelled by a user.
    Cancelled,
    /// Transient: stopped to make room for higher-priority work, about to be queued again.
    Preempted,
    /// Truly unrecoverable; the reason says why.
    Lost,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Preempted,
        JobState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Preempted => "preempted",
            JobState::Lost => "lost",
        }
    }

    /// A terminal job never runs again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Lost
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown job state {0:?}; expected one of queued, running, succeeded, failed, cancelled, preempted, lost")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}
