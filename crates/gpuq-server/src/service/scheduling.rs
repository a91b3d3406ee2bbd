//! The scheduling pass: snapshot the queue, ask the pure core, commit its
//! decisions, then carry them out (spawn, stop). Woken by events, never by a poll.

use super::stop::StopCause;
use super::{dependency_state, running_snapshot, Inner, RunningAttempt, Service};
use gpuq_api::home::now_ms;
use gpuq_core::{
    schedule, Decision, Job, JobId, JobState, Millis, Placement, ResourceDefaults, ScheduleInput,
};
use gpuq_exec::{ExitRecord, Launch};
use gpuq_store::StartRecord;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a job that does not ask for cores or memory gets on this backend:
/// `[resources]` of gpuq.toml over the first node's fair shares (a daemon's
/// own node; Slurm's nodes count nothing, so their defaults are Slurm's).
pub(super) fn resource_defaults(
    config: &crate::config::Config,
    nodes: &[gpuq_core::Node],
) -> ResourceDefaults {
    nodes
        .first()
        .map(|n| config.resources.defaults(n))
        .unwrap_or_default()
}

impl Service {
    /// What a job without its own `cpus` or `memory` gets (see [`resource_defaults`]).
    pub(super) fn resource_defaults(&self) -> ResourceDefaults {
        resource_defaults(&self.config, &self.nodes)
    }

    /// The cores and memory a job of `spec` holds here on each node.
    pub fn resources_of(&self, spec: &gpuq_core::JobSpec) -> gpuq_core::JobResources {
        gpuq_core::effective(spec, &self.resource_defaults())
    }

    /// The memory limit (MiB) a job of `spec` runs under here: its reserved
    /// memory, else a cap that reserves nothing (`gpuq_core::memory_limit_mib`).
    pub fn memory_limit_of(&self, spec: &gpuq_core::JobSpec) -> u64 {
        let d = self.resource_defaults();
        gpuq_core::memory_limit_mib(&gpuq_core::effective(spec, &d), &d)
    }

    /// Runs `f` with the scheduler core's view of the current state.
    pub(super) fn with_input<T>(
        &self,
        inner: &Inner,
        now: Millis,
        f: impl FnOnce(&ScheduleInput<'_>) -> T,
    ) -> T {
        let running = running_snapshot(inner, &self.resource_defaults());
        let lookup = |dep: JobId| dependency_state(&inner.states, dep);
        let input = ScheduleInput {
            now,
            nodes: &self.nodes,
            running: &running,
            dependency: &lookup,
            drained: inner.drained,
            policy: &inner.policy,
        };
        f(&input)
    }

    /// After a pass that decided nothing, a pass for a new submit can only decide
    /// about that job. When it can neither start, fail, nor preempt, the pass is
    /// skipped: a submit then costs the same with 50,000 jobs queued as with none.
    /// Any other change clears `quiet` and wakes the scheduler, so nothing is missed.
    pub(super) fn submit_needs_a_pass(&self, inner: &Inner, job: &Job) -> bool {
        if !self.quiet.load(Ordering::SeqCst) {
            return true;
        }
        let dep_ended = job.spec.after.iter().any(|d| {
            inner
                .states
                .get(d)
                .is_some_and(|s| s.is_terminal() && *s != JobState::Succeeded)
        });
        let can_preempt = inner
            .running
            .values()
            .any(|r| r.preemptible && r.stop.is_none() && r.priority < job.priority);
        if dep_ended || can_preempt {
            return true;
        }
        if inner.drained || job.held_by.is_some() {
            return false;
        }
        // A job for several nodes: the quick test below looks at one node only.
        if job.spec.nodes.unwrap_or(1) > 1 || job.gpus_requested > self.largest_node_gpus() {
            return true;
        }
        let d = self.resource_defaults();
        let want = gpuq_core::effective(&job.spec, &d);
        self.nodes.iter().enumerate().any(|(n, node)| {
            let on_node = inner
                .running
                .values()
                .filter(|r| r.placement.nodes().any(|p| p == n));
            let used_slots = on_node.clone().count() as u32;
            let used_gpus: usize = on_node.clone().map(|r| r.placement.on(n).len()).sum();
            // Cores and memory, where the node counts them (as the core does).
            let held = on_node
                .filter_map(|r| r.spec.as_deref())
                .map(|s| gpuq_core::effective(s, &d))
                .fold((0u64, 0u64), |(c, m), r| {
                    (c + u64::from(r.cpus), m + r.memory_mib)
                });
            let host_free = (node.cpus == 0 || held.0 + u64::from(want.cpus) <= node.cpus.into())
                && (node.memory_mib == 0 || held.1 + want.memory_mib <= node.memory_mib);
            used_slots < node.slots
                && node.gpus.len().saturating_sub(used_gpus) as u32 >= job.gpus_requested
                && host_free
        })
    }

    /// Runs the scheduler whenever woken; never returns.
    pub async fn scheduler_loop(self: Arc<Self>) {
        loop {
            self.wake_scheduler.notified().await;
            // Dependency failures can unblock (fail) further dependents: repeat until quiet.
            while self.schedule_pass() {}
        }
    }

    /// One pass: decide, commit, then act. Returns true when jobs were failed
    /// (their dependents need another look).
    fn schedule_pass(self: &Arc<Self>) -> bool {
        let now = now_ms();
        let (launches, preemptions, failed_any) = {
            let mut inner = self.lock();
            if inner.pending.is_empty() {
                self.quiet.store(true, Ordering::SeqCst);
                return false;
            }
            let decisions =
                self.with_input(&inner, now, |input| schedule(input, inner.pending.values()));
            self.arm_back_off_wake(&inner, now);
            if decisions.is_empty() {
                self.quiet.store(true, Ordering::SeqCst);
                return false;
            }
            let mut starts = Vec::new();
            let mut fails = Vec::new();
            let mut preemptions = Vec::new();
            for d in decisions {
                match d {
                    Decision::Start { job, placement } => {
                        // The store keeps the nodes' names and all the GPUs, in rank order.
                        let names: Vec<&str> = placement
                            .nodes()
                            .map(|n| self.nodes[n].name.as_str())
                            .collect();
                        let record = StartRecord {
                            job,
                            node: names.join(","),
                            // A launch that waits in the backend's queue is priced once it starts.
                            rate: if self.backend.info().queues_launches {
                                None
                            } else {
                                self.pricing.rate(placement.gpu_count())
                            },
                            gpus: placement.0.iter().flat_map(|p| p.gpus.clone()).collect(),
                            runtime: self.runtime_record(
                                &placement,
                                now,
                                self.runtime_environment(&inner, job),
                            ),
                        };
                        starts.push((placement, record))
                    }
                    Decision::Fail { job, mut reason } => {
                        // A queued GPU job on a daemon restarted without GPUs: say how to go on.
                        if self.largest_node_gpus() == 0
                            && reason.contains("the largest node has 0")
                        {
                            reason.push_str(super::NO_GPUS_HINT);
                        }
                        fails.push((job, JobState::Failed, reason))
                    }
                    Decision::Preempt { job, for_job } => preemptions.push((job, for_job)),
                }
            }
            // All of the pass's decisions in one transaction: memory follows only a commit.
            let (placements, starts): (Vec<Placement>, Vec<StartRecord>) =
                starts.into_iter().unzip();
            let attempts = match inner.store.apply_pass(&fails, &starts, now) {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!("cannot record the scheduler's decisions: {e}");
                    return false;
                }
            };
            for (id, _, _) in &fails {
                Self::remove_pending(&mut inner, *id);
                inner.states.insert(*id, JobState::Failed);
            }
            let mut launches = Vec::with_capacity(starts.len());
            for ((start, attempt), placement) in starts.into_iter().zip(attempts).zip(placements) {
                let Some(queued) = Self::remove_pending(&mut inner, start.job) else {
                    continue;
                };
                inner.states.insert(start.job, JobState::Running);
                if attempt == 1 {
                    self.monitor().observe_start(now - queued.submitted_at);
                }
                // The running entry goes in under the same lock as the commit: the next
                // pass must see these GPUs as held.
                let info = inner.store.launch_info(start.job);
                inner.running.insert(
                    start.job,
                    RunningAttempt {
                        rate: start.rate,
                        began: !self.backend.info().queues_launches,
                        group: queued.group,
                        ..RunningAttempt::new(
                            attempt,
                            queued.user.clone(),
                            queued.project.clone(),
                            Some(now),
                            placement.clone(),
                            info.as_ref().ok().map(|i| &i.spec),
                            info.as_ref().map(|i| i.failures).unwrap_or(0),
                        )
                    },
                );
                launches.push((
                    start.job,
                    attempt,
                    placement,
                    queued.user.clone(),
                    info.map_err(|e| e.to_string()),
                ));
            }
            (launches, preemptions, !fails.is_empty())
        };
        self.notify_changed();
        for (job, attempt, placement, user, info) in launches {
            self.launch(job, attempt, placement, &user, info);
        }
        for (victim, for_job) in preemptions {
            self.stop(victim, StopCause::Preempt { for_job });
        }
        failed_any
    }

    /// A retry in back-off becomes eligible later: wake the scheduler then (a timer event).
    fn arm_back_off_wake(self: &Arc<Self>, inner: &Inner, now: Millis) {
        let next = inner
            .pending
            .values()
            .filter_map(|p| p.eligible_at)
            .filter(|&t| t > now)
            .min();
        if let Some(at) = next {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis((at - now) as u64)).await;
                this.wake_scheduler.notify_one();
            });
        }
    }

    /// The account a job of `user` runs as: the user's own when the daemon runs as
    /// root for several users; `None` (the daemon's) otherwise. Checked again at
    /// launch: a job queued before the rules changed never runs as root either.
    pub(super) fn run_as(&self, user: &str) -> Result<Option<gpuq_exec::RunAs>, String> {
        self.identity.job_account(user)
    }

    /// The group that may read the job's checkpoints and outputs: its project's, if
    /// the config names one.
    pub(super) fn share_gid(&self, spec: &gpuq_core::JobSpec) -> Result<Option<u32>, String> {
        let Some((project, group)) = spec.project.as_ref().and_then(|p| {
            let group = self.config.projects.get(p)?.group.as_ref()?;
            Some((p, group))
        }) else {
            return Ok(None);
        };
        super::super::identity::group_id(group)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "projects.{project}.group in gpuq.toml: no group named {group} on this node"
                )
            })
    }

    /// Hands a committed attempt to the backend. An attempt that cannot be
    /// started ends at once with the reason; one that runs at once gets its time limit.
    pub(super) fn launch(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        placement: Placement,
        user: &str,
        info: Result<gpuq_store::LaunchInfo, String>,
    ) {
        let launched = info.and_then(|info| {
            let mut env = info.env;
            let mut argv = info.argv;
            self.add_tracking_env(id, &info.spec, &mut env);
            self.add_sweep_env(id, &mut env);
            self.add_session_launch(id, attempt, &info.spec, &mut argv, &mut env);
            let run_as = self.run_as(user)?;
            // SAFETY: getuid cannot fail.
            let rootless = run_as.is_some() || unsafe { libc::getuid() } != 0;
            let gpus: Vec<u32> = placement
                .0
                .first()
                .map(|p| p.gpus.clone())
                .unwrap_or_default();
            let at = super::envs::EnvLaunch {
                id,
                attempt,
                spec: &info.spec,
                cwd: &info.cwd,
                gpus: &gpus,
                rootless,
            };
            self.add_env_launch(at, &mut argv, &mut env)?;
            let spec = Arc::new(info.spec);
            let launch = Launch {
                job: id,
                attempt,
                placement,
                run_as,
                share_gid: self.share_gid(&spec)?,
                argv,
                cwd: info.cwd,
                env,
                resources: gpuq_core::effective(&spec, &self.resource_defaults()),
                memory_limit_mib: self.memory_limit_of(&spec),
                spec: Arc::clone(&spec),
            };
            self.backend.launch(launch)?;
            Ok(spec)
        });
        match launched {
            Ok(spec) => {
                if let (Some(limit), false) = (spec.time_limit, self.backend.info().queues_launches)
                {
                    self.arm_time_limit(
                        id,
                        attempt,
                        limit.as_millis() as i64,
                        limit.to_string(),
                        spec.signal,
                    );
                }
            }
            Err(why) => {
                tracing::warn!("job {id} attempt {attempt} could not start: {why}");
                self.attempt_ended(id, attempt, Some(ExitRecord::spawn_failed(why, now_ms())));
            }
        }
    }
}
