//! Job arrays in the API: `GET /v1/arrays/{id}` and the actions on a whole
//! array, and `GET /v1/listing`, the queue with each array as one row.
//!
//! An array's id is its first task's job id; every task is also an ordinary
//! job (`/v1/jobs/{id}` acts on that one task only).

use gpuq_core::{Job, JobId, JobState, Millis};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GET /v1/arrays/{id}`, and the answer to an action on a whole array.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ArrayDetail {
    /// The array's id: its first task's job id.
    pub id: JobId,
    /// The spec's name (each task is named `NAME[K]`).
    pub name: Option<String>,
    pub user: String,
    pub project: Option<String>,
    /// The command as one line (the same for every task).
    pub command: String,
    /// Number of tasks.
    pub size: u32,
    /// The tasks' indices, compactly, as `--array` reads them (`0-99`, `1-5:2,6-7`).
    pub indices: String,
    /// The most tasks running at once (`%N`), if limited.
    pub limit: Option<u32>,
    pub submitted_at: Millis,
    /// Tasks per state, e.g. `{"queued": 92, "running": 8}`.
    pub counts: BTreeMap<String, u32>,
    /// The tasks, by index (left out with `tasks=false` and in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<Job>>,
    /// After an action (cancel, hold, release, requeue): the indices of the
    /// tasks it acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acted_on: Option<Vec<u32>>,
}

impl ArrayDetail {
    fn count(&self, state: JobState) -> u32 {
        self.counts.get(state.as_str()).copied().unwrap_or(0)
    }

    /// Every task has ended.
    pub fn ended(&self) -> bool {
        let live: u32 = [JobState::Queued, JobState::Running, JobState::Preempted]
            .into_iter()
            .map(|s| self.count(s))
            .sum();
        live == 0
    }

    /// Every task succeeded.
    pub fn succeeded(&self) -> bool {
        self.count(JobState::Succeeded) == self.size
    }

    /// One word for the whole array: `running` while a task runs, else
    /// `queued` while one waits; once all ended, `succeeded` when all did,
    /// else `failed`, or `cancelled` when every task that did not succeed was.
    pub fn state(&self) -> JobState {
        if self.count(JobState::Running) > 0 {
            JobState::Running
        } else if !self.ended() {
            JobState::Queued
        } else if self.succeeded() {
            JobState::Succeeded
        } else if self.count(JobState::Cancelled) + self.count(JobState::Succeeded) == self.size {
            JobState::Cancelled
        } else {
            JobState::Failed
        }
    }

    /// "2 running, 3 queued, 1 succeeded": the states in the order of a
    /// task's life, those with no task left out.
    pub fn counts_text(&self) -> String {
        let order = [
            JobState::Running,
            JobState::Queued,
            JobState::Preempted,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
            JobState::Lost,
        ];
        let mut parts: Vec<String> = order
            .iter()
            .filter(|s| self.count(**s) > 0)
            .map(|s| format!("{} {s}", self.count(*s)))
            .collect();
        // A state this build does not know of (a newer daemon) is shown as it is named.
        for (state, n) in &self.counts {
            if !order.iter().any(|s| s.as_str() == state) {
                parts.push(format!("{n} {state}"));
            }
        }
        parts.join(", ")
    }
}

/// One row of `GET /v1/listing` (what `gpuq ls` shows): a job, or for an
/// array its first task with the array (`array`, without its tasks).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ListRow {
    #[serde(flatten)]
    pub job: Job,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayDetail>,
}
