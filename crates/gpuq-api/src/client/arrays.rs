//! The client's calls for job arrays (see `crate::arrays`).

use super::{ApiError, Client};
use crate::arrays::{ArrayDetail, ListRow};
use gpuq_core::{Job, JobId, JobState};

impl Client {
    /// `GET /v1/arrays/{id}`: the array, with its tasks when `tasks`.
    pub async fn array(&self, id: JobId, tasks: bool) -> Result<ArrayDetail, ApiError> {
        let url = self.url(&format!("/v1/arrays/{id}"));
        self.json(self.http.get(url).query(&[("tasks", tasks)]))
            .await
    }

    /// The array `id`, or `None` when `id` is not an array's (a plain job, or
    /// no job at all: the job's own call then says which).
    pub async fn array_if_any(&self, id: JobId) -> Result<Option<ArrayDetail>, ApiError> {
        match self.array(id, false).await {
            Ok(a) => Ok(Some(a)),
            Err(ApiError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/arrays/{id}/tasks/{index}`: task `index` of array `id`.
    pub async fn array_task(&self, id: JobId, index: u32) -> Result<Job, ApiError> {
        self.json(
            self.http
                .get(self.url(&format!("/v1/arrays/{id}/tasks/{index}"))),
        )
        .await
    }

    /// `action` (cancel, hold, release or requeue) on every task it applies to.
    pub async fn array_action(&self, id: JobId, action: &str) -> Result<ArrayDetail, ApiError> {
        self.json(
            self.http
                .post(self.url(&format!("/v1/arrays/{id}/{action}"))),
        )
        .await
    }

    /// Waits (long poll) up to `timeout_s` for every task to end; returns the
    /// array (without its tasks) in whatever state it is then.
    pub async fn wait_array(&self, id: JobId, timeout_s: u64) -> Result<ArrayDetail, ApiError> {
        let url = self.url(&format!("/v1/arrays/{id}/wait"));
        self.json(self.http.get(url).query(&[("timeout", timeout_s)]))
            .await
    }

    /// `GET /v1/listing`: the jobs with each array as one row, newest first.
    pub async fn listing(
        &self,
        states: &[JobState],
        limit: Option<u32>,
    ) -> Result<Vec<ListRow>, ApiError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if !states.is_empty() {
            let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
            query.push(("state", states.join(",")));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        self.json(self.http.get(self.url("/v1/listing")).query(&query))
            .await
    }
}
