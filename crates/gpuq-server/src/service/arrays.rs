//! Job arrays: one submit, one id, many tasks. Each task is an ordinary job
//! (store, queue, scheduler, backend see nothing else) with `array_id`,
//! `array_index` and the array's `array_limit`; the scheduler core caps the
//! tasks running at once through the job's `group`. Here: what acts on a whole
//! array at once (cancel, hold, release, requeue), the array's summary, and
//! the checks a submit of an array adds.

use super::stop::StopCause;
use super::{Service, ServiceError};
use gpuq_api::arrays::{ArrayDetail, ListRow};
use gpuq_api::home::now_ms;
use gpuq_core::{Job, JobGroup, JobId, JobSpec, JobState, SpecError};
use gpuq_store::ListFilter;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// The group a job counts against in the scheduler: its array's, when the array has a limit.
pub(super) fn group_of(job: &Job) -> Option<JobGroup> {
    job.array_id
        .zip(job.array_limit)
        .map(|(id, limit)| JobGroup { id, limit })
}

/// Jobs a submit of `spec` queues: one, or one per task.
pub(super) fn jobs_in(spec: &JobSpec) -> u32 {
    spec.array.as_ref().map_or(1, |a| a.len() as u32)
}

/// The answer to a submit over a queued-jobs quota: `who` has `queued` queued,
/// the submit adds `adding`, at most `limit` are allowed.
pub(super) fn over_queued_quota(
    who: &str,
    queued: u32,
    adding: u32,
    limit: u32,
    key: &str,
) -> String {
    if adding == 1 {
        format!(
            "{who} already has {queued} queued jobs, the most allowed ({limit}) by `{key}` in gpuq.toml; \
             wait for some to start or cancel some"
        )
    } else {
        format!(
            "{who} has {queued} queued jobs and this array adds {adding} tasks, more than the {limit} allowed \
             by `{key}` in gpuq.toml; submit fewer tasks (--array …), or wait for some to start or cancel some"
        )
    }
}

/// The array of `tasks` (those of one array, by index), with the tasks when `with_tasks`.
pub fn detail_of(tasks: Vec<Job>, with_tasks: bool) -> Option<ArrayDetail> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for t in &tasks {
        *counts.entry(t.state.as_str().to_string()).or_default() += 1;
    }
    let indices: Vec<u32> = tasks.iter().filter_map(|t| t.array_index).collect();
    let mut a = summary_of(tasks.first()?, &indices, counts);
    a.tasks = with_tasks.then_some(tasks);
    Some(a)
}

/// The array whose first task is `first`, with these indices and counts, without its tasks.
fn summary_of(first: &Job, indices: &[u32], counts: BTreeMap<String, u32>) -> ArrayDetail {
    ArrayDetail {
        id: first.array_id.unwrap_or(first.id),
        name: first
            .name
            .as_deref()
            .map(|n| gpuq_core::array::array_name(n).to_string()),
        user: first.user.clone(),
        project: first.project.clone(),
        command: first.command.clone(),
        size: indices.len() as u32,
        indices: gpuq_core::array::compact(indices),
        limit: first.array_limit,
        submitted_at: first.submitted_at,
        counts,
        acted_on: None,
        tasks: None,
    }
}

/// `after` an array's id waits for every task of the array (Slurm's
/// `afterok` on an array job): the id is replaced by its tasks' ids.
pub(super) fn after_whole_arrays(
    store: &gpuq_store::Store,
    mut spec: JobSpec,
) -> Result<JobSpec, ServiceError> {
    if spec.after.is_empty() {
        return Ok(spec);
    }
    let mut after = Vec::with_capacity(spec.after.len());
    let mut seen = HashSet::new();
    for &dep in &spec.after {
        let tasks = store.array_task_ids(dep)?;
        let deps = if tasks.is_empty() { vec![dep] } else { tasks };
        after.extend(deps.into_iter().filter(|d| seen.insert(*d)));
    }
    spec.after = after;
    Ok(spec)
}

impl Service {
    /// Refuses an array larger than the config allows (`[scheduler] max_array_tasks`).
    pub(super) fn check_array(&self, spec: &JobSpec) -> Result<(), ServiceError> {
        let Some(array) = &spec.array else {
            return Ok(());
        };
        let limit = self
            .config
            .scheduler
            .max_array_tasks
            .unwrap_or(gpuq_core::array::MAX_TASKS as u32);
        if array.len() as u32 > limit {
            return Err(SpecError::new(
                "array",
                format!(
                    "{} tasks; this daemon takes at most {limit} in one array ([scheduler] max_array_tasks \
                     in gpuq.toml): split it, e.g. --array 0-{} and then the rest",
                    array.len(),
                    limit.saturating_sub(1)
                ),
            )
            .into());
        }
        Ok(())
    }

    /// The tasks of array `id`, by index; empty when `id` is not an array's.
    pub fn array_tasks(&self, id: JobId) -> Result<Vec<Job>, ServiceError> {
        Ok(self.lock().store.array_tasks(id)?)
    }

    /// Array `id` without its tasks: counted in SQL, no task read (what long
    /// polls and listings ask for again and again). `None`: not an array's id.
    pub fn array_summary(&self, id: JobId) -> Result<Option<ArrayDetail>, ServiceError> {
        let inner = self.lock();
        Self::summary_in(&inner.store, id)
    }

    fn summary_in(
        store: &gpuq_store::Store,
        id: JobId,
    ) -> Result<Option<ArrayDetail>, ServiceError> {
        let Some(first) = store.job(id)?.filter(|j| j.is_array_head()) else {
            return Ok(None);
        };
        let indices = store.array_indices(id)?;
        let counts = store.array_counts(&[id])?.remove(&id).unwrap_or_default();
        Ok(Some(summary_of(&first, &indices, counts)))
    }

    /// Task `index` of array `id`.
    pub fn array_task(&self, id: JobId, index: u32) -> Result<Option<Job>, ServiceError> {
        Ok(self.lock().store.array_task(id, index)?)
    }

    /// Cancels every task of array `id` that has not ended: the queued ones at
    /// once (one transaction, and out of the queue before any running task
    /// stops, so none of them starts in its place), the running ones by the
    /// stop protocol. Returns the indices of the tasks cancelled or stopping.
    pub fn cancel_array(self: &Arc<Self>, id: JobId, by: &str) -> Result<Vec<u32>, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        let tasks = inner.store.array_tasks(id)?;
        let (mut queued, mut running, mut acted) = (Vec::new(), Vec::new(), Vec::new());
        for t in &tasks {
            match inner.states.get(&t.id) {
                Some(JobState::Queued | JobState::Preempted) => queued.push(t.id),
                Some(JobState::Running) => running.push(t.id),
                _ => continue,
            }
            acted.push(t.array_index.unwrap_or_default());
        }
        if acted.is_empty() {
            return Err(ServiceError::Conflict(format!(
                "array {id} already ended ({}); nothing to cancel",
                summary(tasks)
            )));
        }
        let reason = format!("cancelled by {by}");
        let ends: Vec<(JobId, JobState, String)> = queued
            .iter()
            .map(|&t| (t, JobState::Cancelled, reason.clone()))
            .collect();
        inner.store.end_queued(&ends, now)?;
        let gone: HashSet<JobId> = queued.iter().copied().collect();
        inner.pending.retain(|_, p| !gone.contains(&p.id));
        for t in &queued {
            inner.states.insert(*t, JobState::Cancelled);
        }
        drop(inner);
        for t in running {
            self.stop(t, StopCause::Cancel { by: by.to_string() });
        }
        self.changed_and_reschedule();
        Ok(acted)
    }

    /// Holds (`hold`) every queued task of array `id` that is not held, or
    /// releases every held one, in one transaction. Returns their indices.
    pub fn hold_array(&self, id: JobId, hold: bool, by: &str) -> Result<Vec<u32>, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        let tasks = inner.store.array_tasks(id)?;
        let targets: Vec<&Job> = tasks
            .iter()
            .filter(|t| inner.states.get(&t.id) == Some(&JobState::Queued))
            .filter(|t| t.held_by.is_some() != hold)
            .collect();
        if targets.is_empty() {
            return Err(ServiceError::Conflict(if hold {
                format!(
                    "array {id} has no queued task that is not held ({}); only queued tasks can be held",
                    summary(tasks.clone())
                )
            } else {
                format!("array {id} has no held task ({})", summary(tasks.clone()))
            }));
        }
        let ids: Vec<JobId> = targets.iter().map(|t| t.id).collect();
        let acted: Vec<u32> = targets
            .iter()
            .map(|t| t.array_index.unwrap_or_default())
            .collect();
        inner
            .store
            .set_held_many(&ids, hold.then_some(by), by, now)?;
        let ids: HashSet<JobId> = ids.into_iter().collect();
        for p in inner.pending.values_mut().filter(|p| ids.contains(&p.id)) {
            p.held = hold;
        }
        drop(inner);
        self.changed_and_reschedule();
        Ok(acted)
    }

    /// Queues again every task of array `id` that ended without success
    /// (failed, cancelled, lost), each with a fresh retry budget, in one
    /// transaction; succeeded, queued and running tasks are left alone (`gpuq
    /// requeue ID.K` requeues one task whatever its state). Returns their indices.
    pub fn requeue_array(&self, id: JobId, by: &str) -> Result<Vec<u32>, ServiceError> {
        let now = now_ms();
        let mut inner = self.lock();
        let tasks = inner.store.array_tasks(id)?;
        let targets: Vec<&Job> = tasks
            .iter()
            .filter(|t| {
                inner
                    .states
                    .get(&t.id)
                    .is_some_and(|s| s.is_terminal() && *s != JobState::Succeeded)
            })
            .collect();
        if targets.is_empty() {
            return Err(ServiceError::Conflict(format!(
                "array {id} has no task that ended without success ({}); `gpuq requeue {id}.K` requeues one task",
                summary(tasks.clone())
            )));
        }
        let ids: Vec<JobId> = targets.iter().map(|t| t.id).collect();
        let acted = targets
            .iter()
            .map(|t| t.array_index.unwrap_or_default())
            .collect();
        inner.store.requeue_ended_many(&ids, by, now)?;
        for id in ids {
            if let Some(job) = inner.store.job(id)? {
                self.enqueue(&mut inner, &job);
                inner.states.insert(id, JobState::Queued);
            }
        }
        drop(inner);
        self.changed_and_reschedule();
        Ok(acted)
    }

    /// The listing with each array as one row (see `Store::list_rows`).
    pub fn listing(&self, filter: &ListFilter) -> Result<Vec<ListRow>, ServiceError> {
        let inner = self.lock();
        let rows = inner.store.list_rows(filter)?;
        let heads: Vec<JobId> = rows
            .iter()
            .filter(|j| j.is_array_head())
            .map(|j| j.id)
            .collect();
        let mut arrays = std::collections::HashMap::new();
        for id in heads {
            if let Some(a) = Self::summary_in(&inner.store, id)? {
                arrays.insert(id, a);
            }
        }
        Ok(rows
            .into_iter()
            .map(|job| ListRow {
                array: arrays.remove(&job.id),
                job,
            })
            .collect())
    }
}

/// "6 tasks: 4 succeeded, 2 cancelled"
fn summary(tasks: Vec<Job>) -> String {
    match detail_of(tasks, false) {
        Some(a) => format!(
            "{}: {}",
            gpuq_core::plural(a.size.into(), "task"),
            a.counts_text()
        ),
        None => "no tasks".into(),
    }
}
