//! A job's memory and CPU as its cgroup counts them: an ended attempt's
//! figures come with its exit record (`outcome::host_usage`, stored with the
//! end); a running attempt's are read here, when asked, from the counters of
//! the groups its launch recorded (`attempt-N.cgroup` in the job directory).
//! A job that runs unconfined, or on a backend whose groups are not this
//! machine's (Slurm keeps its own), has no record and shows no figures.

use super::Service;
use gpuq_core::job::HostUsage;
use gpuq_core::{Attempt, Job, JobState};

impl Service {
    /// The running attempt's figures so far; `None` when it runs unconfined.
    /// A handful of small reads from cgroupfs, never a wait on the job.
    fn live_host_usage(&self, job: &Job) -> Option<HostUsage> {
        if job.state != JobState::Running || job.attempt == 0 {
            return None;
        }
        let groups = gpuq_exec::cgroup::JobGroups::load(&self.job_dir(job.id), job.attempt)
            .ok()
            .flatten()?;
        Some(super::outcome::shown_usage(
            &gpuq_exec::cgroup::usage::read_usage(&groups),
        ))
    }

    /// A listed running job with its memory and CPU so far (`gpuq top`).
    pub fn add_live_host_usage(&self, job: &mut Job) {
        if let Some(u) = self.live_host_usage(job) {
            job.host_usage = Some(u);
        }
    }

    /// The running attempt of a shown job with its figures so far, as an
    /// ended one has its own (`gpuq show`, the dashboard's job page).
    pub fn add_running_attempt_host_usage(&self, job: &Job, attempts: &mut [Attempt]) {
        // A job that went through `add_live_state` has them already.
        let Some(u) = job.host_usage.clone().or_else(|| self.live_host_usage(job)) else {
            return;
        };
        if let Some(a) = attempts
            .iter_mut()
            .find(|a| a.attempt == job.attempt && a.ended_at.is_none())
        {
            a.host_usage = Some(u);
        }
    }
}
