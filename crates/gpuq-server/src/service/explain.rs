//! `gpuq explain`: the rule that holds a queued job back, in a sentence, from
//! the very pass the scheduler runs (`gpuq_core::explain`). Each text reads on
//! from "job 7 " ("job 7 is held by ana; …"), as `gpuq explain` prints it.

use super::{Inner, Service, ServiceError};
use gpuq_api::home::now_ms;
use gpuq_core::{JobId, JobState, Millis, WaitReason};
use std::collections::HashMap;

impl Service {
    /// One sentence per queued job (all of them), keyed by id.
    pub fn explain_queued(&self) -> Result<HashMap<JobId, String>, ServiceError> {
        let inner = self.lock();
        let now = now_ms();
        let (decisions, reasons) = self.with_input(&inner, now, |input| {
            gpuq_core::explain(input, inner.pending.values())
        });
        let mut out: HashMap<JobId, String> = HashMap::new();
        for (id, reason) in reasons {
            out.insert(id, self.render(&inner, id, &reason, now)?);
        }
        for d in decisions {
            if let gpuq_core::Decision::Start { job, .. } = d {
                out.insert(job, "starts now: its GPUs are free".into());
            }
        }
        Ok(out)
    }

    /// One job, whatever its state.
    pub fn explain(&self, id: JobId) -> Result<String, ServiceError> {
        let job = self.job(id)?;
        let text = match job.state {
            JobState::Queued => self
                .explain_queued()?
                .remove(&id)
                .unwrap_or_else(|| "is about to start".into()),
            JobState::Running if self.backend.info().queues_launches => {
                let to = &self.backend.info().name;
                match self.backend.status(id) {
                    Some(r) => format!("was handed to {to} (attempt {}): {r}", job.attempt),
                    None => format!(
                        "was handed to {to} (attempt {}): waiting for its first report",
                        job.attempt
                    ),
                }
            }
            JobState::Running => {
                let gpus = job
                    .gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let on = if gpus.is_empty() {
                    "without GPUs".to_string()
                } else {
                    format!("on GPUs {gpus}")
                };
                format!("is running {on} (attempt {})", job.attempt)
            }
            state => {
                let reason = job.reason.map(|r| format!(": {r}")).unwrap_or_default();
                if state.is_terminal() {
                    format!("has ended ({state}{reason})")
                } else {
                    format!("is {state}{reason}")
                }
            }
        };
        Ok(text)
    }

    fn render(
        &self,
        inner: &Inner,
        id: JobId,
        reason: &WaitReason,
        now: Millis,
    ) -> Result<String, ServiceError> {
        Ok(match reason {
            WaitReason::Dependency(dep) => {
                let state = inner
                    .states
                    .get(dep)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown".into());
                let dep = match inner.store.job(*dep)? {
                    Some(j) if j.array_id.is_some() => format!("task {}", j.reference()),
                    _ => format!("job {dep}"),
                };
                format!("waits for {dep} to succeed (it is {state})")
            }
            WaitReason::Held => {
                let job = inner.store.job(id)?;
                let array = job.as_ref().and_then(|j| j.array_id);
                let by = job
                    .and_then(|j| j.held_by)
                    .unwrap_or_else(|| "a user".into());
                match array {
                    // The same words for every task, so an array's are told at once.
                    Some(a) => format!(
                        "is held by {by}; `gpuq release {a}` releases the array's held tasks (`gpuq release {a}.K` one of them)"
                    ),
                    None => format!("is held by {by}; `gpuq release {id}` lets it start"),
                }
            }
            WaitReason::Outside(what) => format!("waits: {what}"),
            WaitReason::Drained => {
                "waits: the queue is drained for maintenance; `gpuq undrain` starts jobs again"
                    .into()
            }
            WaitReason::BackOff { until } => {
                // What ended the last attempt: a crash is retried, exit 75 requeued.
                let until = clock(*until, now);
                match inner.store.job(id)?.and_then(|j| j.reason) {
                    Some(r)
                        if r.starts_with("requeued by the job") || r.starts_with("requeued: ") =>
                    {
                        let what = r.split(';').next().unwrap_or(&r);
                        format!("is {what}, waiting out its back-off until {until}")
                    }
                    Some(r) => format!("is a retry waiting out its back-off until {until} ({r})"),
                    None => format!("is a retry waiting out its back-off until {until}"),
                }
            }
            WaitReason::UserQuota { user, used, limit } => {
                format!(
                    "waits: {user} already uses {used} of a quota of {} at once",
                    gpuq_core::plural((*limit).into(), "GPU")
                )
            }
            WaitReason::ProjectQuota {
                project,
                used,
                limit,
            } => {
                format!(
                    "waits: project {project} already uses {used} of its quota of {} at once",
                    gpuq_core::plural((*limit).into(), "GPU")
                )
            }
            WaitReason::Slots => match self.nodes.iter().map(|n| n.slots).sum::<u32>() {
                1 => "waits for the only job slot, which is busy".into(),
                n => format!("waits for a job slot: all {n} are busy"),
            },
            WaitReason::Resources {
                gpus,
                most_free,
                reserved,
            } => {
                let total: usize = self.nodes.iter().map(|n| n.gpus.len()).sum();
                let holders = self.holders(inner, now)?;
                let in_use = if *most_free == 0 {
                    format!("all {total} are in use by {holders}")
                } else {
                    format!("{most_free} free, the others in use by {holders}")
                };
                let next = match reserved {
                    Some(Some(start)) => format!(
                        "; it is next, with GPUs reserved by {} at the latest",
                        clock(*start, now)
                    ),
                    Some(None) => "; it is next, as soon as GPUs free up".into(),
                    None => String::new(),
                };
                format!(
                    "waits for {gpus} GPU{}: {in_use}{next}",
                    if *gpus == 1 { "" } else { "s" }
                )
            }
            WaitReason::Cores {
                cpus,
                most_free,
                reserved,
            } => {
                let free = match most_free {
                    0 => "none is free".to_string(),
                    1 => "1 is free".to_string(),
                    n => format!("{n} are free"),
                };
                format!(
                    "waits: needs {} free; {free} {}, the others are reserved by {}{}",
                    gpuq_core::plural((*cpus).into(), "core"),
                    self.where_free(),
                    self.host_holders(inner, now, |r| r.cpus > 0)?,
                    next_text(reserved, "cores", now)
                )
            }
            WaitReason::Memory {
                mib,
                most_free_mib,
                reserved,
            } => {
                let free = match most_free_mib {
                    0 => "none is free".to_string(),
                    m => format!("{} is free", gpuq_core::resources::mib_text(*m)),
                };
                format!(
                    "waits: needs {} of memory free; {free} {}, the rest is reserved by {}{}",
                    gpuq_core::resources::mib_text(*mib),
                    self.where_free(),
                    self.host_holders(inner, now, |r| r.memory_mib > 0)?,
                    next_text(reserved, "memory", now)
                )
            }
            WaitReason::Nodes(shortage) => {
                let next = match shortage.reserved {
                    Some(Some(start)) => format!(
                        "; it is next, with GPUs reserved by {} at the latest",
                        clock(start, now)
                    ),
                    Some(None) => "; it is next, as soon as GPUs free up".into(),
                    None => String::new(),
                };
                format!("waits: {shortage}{next}")
            }
            WaitReason::GroupLimit {
                group,
                running,
                limit,
            } => {
                let tasks = gpuq_core::plural((*limit).into(), "task");
                format!(
                    "waits: its array {group} runs at most {tasks} at once (--array …%{limit}) and {running} {} running",
                    if *running == 1 { "is" } else { "are" }
                )
            }
            WaitReason::Reservation { for_job, start } => {
                let when = start
                    .map(|s| format!(" from {}", clock(s, now)))
                    .unwrap_or_default();
                format!(
                    "waits: its {} free, but starting it could delay job {for_job}, which has them reserved{when}; \
                     a --time-limit that ends before then would let it start now",
                    reserved_words(inner, id)
                )
            }
        })
    }

    /// "on this node" (a daemon's own), "on one node" (several).
    fn where_free(&self) -> &'static str {
        if self.nodes.len() <= 1 {
            "on this node"
        } else {
            "on one node"
        }
    }

    /// The running jobs that reserve cores (or memory), as [`Service::holders`] says them.
    fn host_holders(
        &self,
        inner: &Inner,
        now: Millis,
        holds: impl Fn(&gpuq_core::JobResources) -> bool,
    ) -> Result<String, ServiceError> {
        let d = self.resource_defaults();
        self.holders_where(inner, now, |r| {
            r.spec
                .as_deref()
                .is_some_and(|s| holds(&gpuq_core::effective(s, &d)))
        })
    }

    /// "jobs 12 (alice, ends by 14:05 at its time limit) and 13 (bob, no time limit)"
    fn holders(&self, inner: &Inner, now: Millis) -> Result<String, ServiceError> {
        self.holders_where(inner, now, |r| r.placement.gpu_count() > 0)
    }

    fn holders_where(
        &self,
        inner: &Inner,
        now: Millis,
        holds: impl Fn(&super::RunningAttempt) -> bool,
    ) -> Result<String, ServiceError> {
        let mut ids: Vec<&JobId> = inner
            .running
            .iter()
            .filter(|(_, r)| holds(r))
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        let mut parts = Vec::new();
        for id in ids {
            let run = &inner.running[id];
            let user = inner.store.job(*id)?.map(|j| j.user).unwrap_or_default();
            let end = match (run.stop.is_some(), run.ends_by) {
                (true, _) => "stopping".to_string(),
                (false, Some(e)) => format!("ends by {} at its time limit", clock(e, now)),
                (false, None) => "no time limit".to_string(),
            };
            parts.push(format!("{id} ({user}, {end})"));
        }
        Ok(match parts.len() {
            0 => "no job".into(),
            1 => format!("job {}", parts[0]),
            _ => {
                let last = parts.pop().unwrap_or_default();
                format!("jobs {} and {last}", parts.join(", "))
            }
        })
    }
}

/// What a job waiting for a reservation would take: "GPUs", "GPUs and
/// cores", "cores and memory" (a CPU-only job's)…
fn reserved_words(inner: &Inner, id: JobId) -> String {
    let (gpus, res) = inner
        .pending
        .values()
        .find(|p| p.id == id)
        .map(|p| (p.gpus, p.resources))
        .unwrap_or_default();
    let words: Vec<&str> = [
        (gpus > 0, "GPUs"),
        (res.cpus > 0, "cores"),
        (res.memory_mib > 0, "memory"),
    ]
    .into_iter()
    .filter_map(|(has, w)| has.then_some(w))
    .collect();
    match words.as_slice() {
        [] => "GPUs are".into(),
        ["memory"] => "memory is".into(),
        [one] => format!("{one} are"),
        [init @ .., last] => format!("{} and {last} are", init.join(", ")),
    }
}

/// "; it is next, with cores reserved by 14:05 at the latest", or nothing.
fn next_text(reserved: &Option<Option<Millis>>, what: &str, now: Millis) -> String {
    match reserved {
        Some(Some(start)) => format!(
            "; it is next, with {what} reserved by {} at the latest",
            clock(*start, now)
        ),
        Some(None) => format!("; it is next, as soon as {what} free up"),
        None => String::new(),
    }
}

/// Local wall-clock time: "14:05" today, "Dec 3 14:05" otherwise.
fn clock(at: Millis, now: Millis) -> String {
    let fmt = |ms: Millis| {
        let secs = (ms / 1000) as libc::time_t;
        // SAFETY: localtime_r writes into the struct we own.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        unsafe { libc::localtime_r(&secs, &mut tm) };
        tm
    };
    let (t, n) = (fmt(at), fmt(now));
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    if (t.tm_year, t.tm_yday) == (n.tm_year, n.tm_yday) {
        format!("{:02}:{:02}:{:02}", t.tm_hour, t.tm_min, t.tm_sec)
    } else {
        format!(
            "{} {} {:02}:{:02}",
            MONTHS[t.tm_mon.clamp(0, 11) as usize],
            t.tm_mday,
            t.tm_hour,
            t.tm_min
        )
    }
}
