//! The scheduler: a pure function from a snapshot of the queue, the running
//! jobs, the node inventories and `now` to a list of decisions.
//!
//! Policy (in this order):
//! - queue order is priority class (high first), then submit time, then id;
//! - a job waits until every job in its `after` list succeeded, and fails when
//!   one of them ended any other way;
//! - all of a job's GPUs are allocated at once on one node (gang), on the node
//!   that it fits most tightly (best fit), lowest GPU indices first;
//! - EASY backfill: the first job that cannot start gets a reservation at the
//!   earliest time enough GPUs free up (from the running jobs' time limits); a
//!   later job may start ahead only if it cannot delay that reservation: it
//!   ends (by its time limit) before the reserved start, or it uses only GPUs
//!   the reserved job will not need, or it runs on another node;
//! - held jobs and jobs in a retry back-off (`eligible_at` in the future) wait;
//! - preemption: when the first job that cannot start has a higher priority
//!   class than some running `preemptible` jobs, the fewest of them whose GPUs
//!   make it fit on one node are stopped (never a job that is not preemptible,
//!   and nothing more while earlier victims are still stopping).

pub mod las;

use crate::{JobId, Millis, Priority};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// One machine's schedulable resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// GPU indices (nvidia-smi order).
    pub gpus: Vec<u32>,
    /// Jobs that may run at once on this node (GPU jobs and CPU-only jobs alike).
    pub slots: u32,
    /// What each GPU is, in the order of `gpus` (empty when unknown).
    pub attrs: Vec<GpuAttrs>,
    /// Interconnect quality between GPUs, in the order of `gpus`; higher is
    /// better (e.g. 3 NVLink, 2 same PCIe switch, 1 same CPU, 0 across CPUs).
    /// Empty: all pairs equal.
    pub links: Vec<Vec<u8>>,
}

/// A GPU's model and memory, for jobs that ask for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAttrs {
    pub model: String,
    pub memory_mib: u64,
}

impl Node {
    fn position(&self, gpu: u32) -> Option<usize> {
        self.gpus.iter().position(|&g| g == gpu)
    }

    /// Whether `gpu` satisfies the job's model and memory constraints.
    fn suits(&self, job: &PendingJob, gpu: u32) -> bool {
        if job.gpu_type.is_none() && job.gpu_mem_mib.is_none() {
            return true;
        }
        let Some(attrs) = self.position(gpu).and_then(|p| self.attrs.get(p)) else {
            return false;
        };
        let model_ok = job.gpu_type.as_ref().is_none_or(|t| {
            attrs
                .model
                .to_ascii_lowercase()
                .contains(&t.to_ascii_lowercase())
        });
        model_ok && job.gpu_mem_mib.is_none_or(|m| attrs.memory_mib >= m)
    }

    fn link(&self, a: u32, b: u32) -> u32 {
        match (self.position(a), self.position(b)) {
            (Some(pa), Some(pb)) => self
                .links
                .get(pa)
                .and_then(|row| row.get(pb))
                .copied()
                .unwrap_or(0) as u32,
            _ => 0,
        }
    }

    /// GPUs of this node that suit the job, free or not.
    pub fn suitable(&self, job: &PendingJob) -> u32 {
        self.gpus.iter().filter(|&&g| self.suits(job, g)).count() as u32
    }

    /// `k` of the candidate GPUs with the best interconnect among them (greedy
    /// from each start; ties keep the lowest indices).
    fn pick(&self, candidates: &[u32], k: usize) -> Vec<u32> {
        if k <= 1 || self.links.is_empty() || candidates.len() <= k {
            return candidates.iter().copied().take(k).collect();
        }
        let mut best: Option<(u32, Vec<u32>)> = None;
        for &start in candidates {
            let mut chosen = vec![start];
            let mut score = 0;
            while chosen.len() < k {
                let (gain, next) = candidates
                    .iter()
                    .filter(|c| !chosen.contains(c))
                    .map(|&c| (chosen.iter().map(|&s| self.link(c, s)).sum::<u32>(), c))
                    .max_by_key(|&(gain, c)| (gain, std::cmp::Reverse(c)))
                    .expect("enough candidates");
                score += gain;
                chosen.push(next);
            }
            chosen.sort_unstable();
            if best
                .as_ref()
                .is_none_or(|(s, b)| score > *s || (score == *s && chosen < *b))
            {
                best = Some((score, chosen));
            }
        }
        best.map(|(_, g)| g).unwrap_or_default()
    }
}

/// A job that holds resources now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub id: JobId,
    pub user: Arc<str>,
    pub project: Option<Arc<str>>,
    /// Index into the node list.
    pub node: usize,
    pub gpus: Vec<u32>,
    /// When its time limit stops it, if it has one.
    pub ends_by: Option<Millis>,
    pub priority: Priority,
    pub preemptible: bool,
    /// Being stopped (cancel, time limit, preemption): its GPUs free up soon.
    pub stopping: bool,
}

/// A job waiting in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub id: JobId,
    pub user: Arc<str>,
    pub project: Option<Arc<str>>,
    pub priority: Priority,
    pub submitted_at: Millis,
    pub gpus: u32,
    pub time_limit_ms: Option<u64>,
    pub after: Vec<JobId>,
    /// Held by a user: waits until released.
    pub held: bool,
    /// Only GPUs whose model contains this (case-insensitive), e.g. "A100".
    pub gpu_type: Option<Arc<str>>,
    /// Only GPUs with at least this much memory.
    pub gpu_mem_mib: Option<u64>,
    /// Not before this time (retry back-off).
    pub eligible_at: Option<Millis>,
}

impl PendingJob {
    /// The queue order: sort ascending by this key.
    pub fn queue_key(&self) -> QueueKey {
        QueueKey(std::cmp::Reverse(self.priority), self.submitted_at, self.id)
    }
}

/// Sort key of the queue order (priority class first, then submit time, then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey(pub std::cmp::Reverse<Priority>, pub Millis, pub JobId);

/// What the scheduler knows of a job named in an `after` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependencyState {
    Succeeded,
    /// Queued or running: wait.
    Pending,
    /// Ended without success; the text is its state ("failed", "cancelled", …).
    Ended(String),
    Missing,
}

/// Everything the scheduler looks at, besides the queue itself.
pub struct ScheduleInput<'a> {
    pub now: Millis,
    pub nodes: &'a [Node],
    pub running: &'a [RunningJob],
    /// Dependency lookup; the daemon answers from its state, the simulator from its trace.
    pub dependency: &'a dyn Fn(JobId) -> DependencyState,
    /// While drained, nothing starts (dependency failures are still decided).
    pub drained: bool,
    pub policy: &'a Policy,
}

/// Sharing rules: fair share and quotas.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Each user's fair-share standing: decayed GPU-seconds divided by the user's
    /// share. Within a priority class, lower standing goes first. Users absent
    /// from the map stand at 0.
    pub standing: HashMap<Arc<str>, f64>,
    /// Most GPUs a user may hold at once (by user, then the default).
    pub user_max_gpus: HashMap<Arc<str>, u32>,
    pub default_user_max_gpus: Option<u32>,
    /// Most GPUs a project's jobs may hold at once.
    pub project_max_gpus: HashMap<Arc<str>, u32>,
    /// Strict FIFO: the first job that cannot start blocks every later one (no
    /// backfill). The daemon never sets it; the simulator's `fifo` policy does.
    pub strict_order: bool,
}

impl Policy {
    fn user_limit(&self, user: &str) -> Option<u32> {
        self.user_max_gpus
            .get(user)
            .copied()
            .or(self.default_user_max_gpus)
    }
    fn standing_of(&self, user: &str) -> f64 {
        self.standing.get(user).copied().unwrap_or(0.0)
    }
}

/// A decision for the caller to commit and carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start {
        job: JobId,
        node: usize,
        gpus: Vec<u32>,
    },
    Fail {
        job: JobId,
        reason: String,
    },
    /// Stop this running job by the stop protocol and requeue it, to make room for `for_job`.
    Preempt {
        job: JobId,
        for_job: JobId,
    },
}

struct Reservation {
    node: usize,
    /// Reserved start; `None` when some running job has no time limit, so the start is unknown.
    start: Option<Millis>,
    /// GPUs free at the reserved start beyond what the reserved job needs.
    spare_gpus: u32,
}

/// Why a queued job did not start in a pass: the rule that holds it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Waits for this job (queued or running) to succeed.
    Dependency(JobId),
    Held,
    Drained,
    /// A retry waiting out its back-off.
    BackOff {
        until: Millis,
    },
    /// Not enough free GPUs on any node. `reserved` is set when this job is the
    /// one the GPUs are reserved for (`Some(start)` when the start is known).
    Resources {
        gpus: u32,
        most_free: u32,
        reserved: Option<Option<Millis>>,
    },
    /// Every node runs as many jobs as it has slots.
    Slots,
    /// The user already holds `used` GPUs of a quota of `limit`.
    UserQuota {
        user: Arc<str>,
        used: u32,
        limit: u32,
    },
    /// The project already holds `used` GPUs of a quota of `limit`.
    ProjectQuota {
        project: Arc<str>,
        used: u32,
        limit: u32,
    },
    /// It fits, but would delay the job the GPUs are reserved for (backfill rule).
    Reservation {
        for_job: JobId,
        start: Option<Millis>,
    },
}

/// Decides which queued jobs start now and which fail. `pending` must be in
/// queue order (see [`PendingJob::queue_key`]).
pub fn schedule<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> Vec<Decision> {
    pass(input, pending, None)
}

/// The same pass as [`schedule`], also saying for each job that does not start
/// why it waits. Used by `gpuq explain` and `gpuq ls`; not on the hot path.
pub fn explain<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> (Vec<Decision>, Vec<(JobId, WaitReason)>) {
    let mut reasons = Vec::new();
    let decisions = pass(input, pending, Some(&mut reasons));
    (decisions, reasons)
}

fn pass<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
    mut reasons: Option<&mut Vec<(JobId, WaitReason)>>,
) -> Vec<Decision> {
    let pending = fair_share_order(input.policy, pending);
    let mut why = |job: JobId, reason: WaitReason| {
        if let Some(r) = reasons.as_deref_mut() {
            r.push((job, reason));
        }
    };
    let nodes = input.nodes;
    let mut free: Vec<BTreeSet<u32>> = nodes
        .iter()
        .map(|n| n.gpus.iter().copied().collect())
        .collect();
    let mut free_slots: Vec<u32> = nodes.iter().map(|n| n.slots).collect();
    // (gpu count, ends_by) of every job holding GPUs, per node, including those started in this pass.
    let mut holders: Vec<Vec<(u32, Option<Millis>)>> = vec![Vec::new(); nodes.len()];
    for r in input.running {
        let Some(node_free) = free.get_mut(r.node) else {
            continue;
        };
        for g in &r.gpus {
            node_free.remove(g);
        }
        free_slots[r.node] = free_slots[r.node].saturating_sub(1);
        holders[r.node].push((r.gpus.len() as u32, r.ends_by));
    }
    let largest_node = nodes.iter().map(|n| n.gpus.len() as u32).max().unwrap_or(0);
    // GPUs held per user and per project, for quotas (including this pass's starts).
    let mut user_gpus: HashMap<Arc<str>, u32> = HashMap::new();
    let mut project_gpus: HashMap<Arc<str>, u32> = HashMap::new();
    for r in input.running {
        *user_gpus.entry(r.user.clone()).or_default() += r.gpus.len() as u32;
        if let Some(p) = &r.project {
            *project_gpus.entry(p.clone()).or_default() += r.gpus.len() as u32;
        }
    }

    let mut decisions = Vec::new();
    let mut reservation: Option<Reservation> = None;
    // The first job held back for lack of GPUs: the one preemption may make room for.
    let mut blocked_head: Option<&PendingJob> = None;
    for job in pending {
        match dependency_verdict(job, input.dependency) {
            DependencyVerdict::Ready => {}
            DependencyVerdict::Wait(dep) => {
                why(job.id, WaitReason::Dependency(dep));
                continue;
            }
            DependencyVerdict::Fail(reason) => {
                decisions.push(Decision::Fail {
                    job: job.id,
                    reason,
                });
                continue;
            }
        }
        let largest_node = if job.gpu_type.is_some() || job.gpu_mem_mib.is_some() {
            nodes.iter().map(|n| n.suitable(job)).max().unwrap_or(0)
        } else {
            largest_node
        };
        if job.gpus > largest_node {
            decisions.push(Decision::Fail {
                job: job.id,
                reason: format!(
                    "job asks for {}; the largest node has {largest_node}",
                    crate::plural(job.gpus.into(), "GPU")
                ),
            });
            continue;
        }
        if input.drained || job.held || job.eligible_at.is_some_and(|t| t > input.now) {
            let reason = match (input.drained, job.held, job.eligible_at) {
                (_, true, _) => WaitReason::Held,
                (true, _, _) => WaitReason::Drained,
                (_, _, until) => WaitReason::BackOff {
                    until: until.unwrap_or(input.now),
                },
            };
            why(job.id, reason);
            continue;
        }
        if job.gpus > 0 {
            let used = user_gpus.get(&job.user).copied().unwrap_or(0);
            if let Some(limit) = input
                .policy
                .user_limit(&job.user)
                .filter(|&l| used + job.gpus > l)
            {
                why(
                    job.id,
                    WaitReason::UserQuota {
                        user: job.user.clone(),
                        used,
                        limit,
                    },
                );
                continue;
            }
            if let Some(project) = &job.project {
                let used = project_gpus.get(project).copied().unwrap_or(0);
                if let Some(&limit) = input
                    .policy
                    .project_max_gpus
                    .get(project)
                    .filter(|&&l| used + job.gpus > l)
                {
                    why(
                        job.id,
                        WaitReason::ProjectQuota {
                            project: project.clone(),
                            used,
                            limit,
                        },
                    );
                    continue;
                }
            }
        }
        // Fast path for deep queues: most waiting jobs fit nowhere; decide that without allocating.
        let constrained = job.gpu_type.is_some() || job.gpu_mem_mib.is_some();
        let suitable_free = |n: usize| -> u32 {
            if constrained {
                free[n].iter().filter(|&&g| nodes[n].suits(job, g)).count() as u32
            } else {
                free[n].len() as u32
            }
        };
        let fits_somewhere =
            (0..free.len()).any(|n| free_slots[n] > 0 && suitable_free(n) >= job.gpus);
        if !fits_somewhere {
            let mut reserved = None;
            if reservation.is_none() && job.gpus > 0 {
                reservation = reserve(job.gpus, input.now, nodes, &free, &holders);
                reserved = reservation.as_ref().map(|r| r.start);
                blocked_head = Some(job);
            }
            why(job.id, resources_reason(job, &free, &free_slots, reserved));
            if input.policy.strict_order {
                break;
            }
            continue;
        }
        let ends_by = job
            .time_limit_ms
            .map(|t| input.now.saturating_add(t as i64));
        let usable: Vec<u32> = (0..free.len()).map(suitable_free).collect();
        let chosen = best_fit_nodes(job.gpus, &usable, &free_slots)
            .into_iter()
            .find(|&node| match &mut reservation {
                None => true,
                Some(r) if r.node != node => true,
                Some(r) => {
                    let ends_in_time = matches!((ends_by, r.start), (Some(e), Some(s)) if e <= s);
                    if ends_in_time {
                        true
                    } else if job.gpus <= r.spare_gpus {
                        r.spare_gpus -= job.gpus;
                        true
                    } else {
                        false
                    }
                }
            });
        match chosen {
            Some(node) => {
                let candidates: Vec<u32> = free[node]
                    .iter()
                    .copied()
                    .filter(|&g| nodes[node].suits(job, g))
                    .collect();
                let gpus = nodes[node].pick(&candidates, job.gpus as usize);
                for g in &gpus {
                    free[node].remove(g);
                }
                free_slots[node] -= 1;
                holders[node].push((job.gpus, ends_by));
                *user_gpus.entry(job.user.clone()).or_default() += job.gpus;
                if let Some(p) = &job.project {
                    *project_gpus.entry(p.clone()).or_default() += job.gpus;
                }
                decisions.push(Decision::Start {
                    job: job.id,
                    node,
                    gpus,
                });
            }
            None if reservation.is_none() && job.gpus > 0 => {
                reservation = reserve(job.gpus, input.now, nodes, &free, &holders);
                let reserved = reservation.as_ref().map(|r| r.start);
                why(job.id, resources_reason(job, &free, &free_slots, reserved));
                blocked_head = Some(job);
            }
            None if input.policy.strict_order => break,
            None => {
                let head = blocked_head.map(|h| h.id).unwrap_or(job.id);
                let start = reservation.as_ref().and_then(|r| r.start);
                why(
                    job.id,
                    WaitReason::Reservation {
                        for_job: head,
                        start,
                    },
                );
            }
        }
    }
    if let Some(head) = blocked_head {
        for victim in preemption_victims(head, input, &free) {
            decisions.push(Decision::Preempt {
                job: victim,
                for_job: head.id,
            });
        }
    }
    decisions
}

/// The fewest preemptible, lower-priority running jobs on one node whose GPUs
/// let `head` start there. Empty when `head` needs no preemption (it will fit
/// once the jobs already stopping are gone) or when no set of victims suffices.
fn preemption_victims(
    head: &PendingJob,
    input: &ScheduleInput<'_>,
    free: &[BTreeSet<u32>],
) -> Vec<JobId> {
    let mut best: Option<Vec<&RunningJob>> = None;
    for (node, info) in input.nodes.iter().enumerate() {
        if info.suitable(head) < head.gpus {
            continue;
        }
        // Only GPUs that suit the head job count: freeing an L4 does not help a job that needs an A100.
        let suiting = |gpus: &[u32]| gpus.iter().filter(|&&g| info.suits(head, g)).count() as u32;
        let on_node = || input.running.iter().filter(move |r| r.node == node);
        let stopping: u32 = on_node()
            .filter(|r| r.stopping)
            .map(|r| suiting(&r.gpus))
            .sum();
        let free_suiting = free[node].iter().filter(|&&g| info.suits(head, g)).count() as u32;
        let mut available = free_suiting + stopping;
        if available >= head.gpus {
            return Vec::new();
        }
        let mut candidates: Vec<&RunningJob> = on_node()
            .filter(|r| {
                r.preemptible && !r.stopping && r.priority < head.priority && suiting(&r.gpus) > 0
            })
            .collect();
        // Largest first gives the fewest victims; then the lowest class; then the newest (least work lost).
        candidates.sort_by_key(|r| {
            (
                std::cmp::Reverse(suiting(&r.gpus)),
                r.priority,
                std::cmp::Reverse(r.id),
            )
        });
        let mut chosen = Vec::new();
        for c in candidates {
            if available >= head.gpus {
                break;
            }
            available += suiting(&c.gpus);
            chosen.push(c);
        }
        if available < head.gpus {
            continue;
        }
        let gpus = |v: &Vec<&RunningJob>| v.iter().map(|r| r.gpus.len()).sum::<usize>();
        if best
            .as_ref()
            .is_none_or(|b| (chosen.len(), gpus(&chosen)) < (b.len(), gpus(b)))
        {
            best = Some(chosen);
        }
    }
    best.unwrap_or_default().into_iter().map(|r| r.id).collect()
}

/// Queue order with fair share: priority class, then the user's standing, then
/// submit order. Without standings, or with one user, the caller's order is kept
/// and nothing is sorted (deep single-user queues stay cheap).
fn fair_share_order<'p>(
    policy: &Policy,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> Vec<&'p PendingJob> {
    let mut jobs: Vec<&PendingJob> = pending.into_iter().collect();
    let several_users = jobs.windows(2).any(|w| w[0].user != w[1].user);
    if policy.standing.is_empty() || !several_users {
        return jobs;
    }
    jobs.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(
                policy
                    .standing_of(&a.user)
                    .total_cmp(&policy.standing_of(&b.user)),
            )
            .then((a.submitted_at, a.id).cmp(&(b.submitted_at, b.id)))
    });
    jobs
}

fn resources_reason(
    job: &PendingJob,
    free: &[BTreeSet<u32>],
    free_slots: &[u32],
    reserved: Option<Option<Millis>>,
) -> WaitReason {
    let with_slots: Vec<usize> = (0..free.len()).filter(|&n| free_slots[n] > 0).collect();
    if with_slots.is_empty() {
        return WaitReason::Slots;
    }
    let most_free = with_slots
        .iter()
        .map(|&n| free[n].len() as u32)
        .max()
        .unwrap_or(0);
    WaitReason::Resources {
        gpus: job.gpus,
        most_free,
        reserved,
    }
}

enum DependencyVerdict {
    Ready,
    Wait(JobId),
    Fail(String),
}

fn dependency_verdict(
    job: &PendingJob,
    lookup: &dyn Fn(JobId) -> DependencyState,
) -> DependencyVerdict {
    let mut wait = None;
    for &dep in &job.after {
        match lookup(dep) {
            DependencyState::Succeeded => {}
            DependencyState::Pending => wait = wait.or(Some(dep)),
            DependencyState::Ended(state) => {
                return DependencyVerdict::Fail(format!("dependency job {dep} {state}"))
            }
            DependencyState::Missing => {
                return DependencyVerdict::Fail(format!("dependency job {dep} does not exist"))
            }
        }
    }
    match wait {
        Some(dep) => DependencyVerdict::Wait(dep),
        None => DependencyVerdict::Ready,
    }
}

/// Nodes where the job fits now, tightest fit first (ties: lower node index).
/// Nodes where the job fits now (`usable`: free GPUs that suit it), tightest fit first.
fn best_fit_nodes(gpus: u32, usable: &[u32], free_slots: &[u32]) -> Vec<usize> {
    let mut fits: Vec<usize> = (0..usable.len())
        .filter(|&n| free_slots[n] > 0 && usable[n] >= gpus)
        .collect();
    fits.sort_by_key(|&n| (usable[n] - gpus, n));
    fits
}

/// The earliest start a job of `gpus` GPUs can be promised, from the time limits of the holders.
fn reserve(
    gpus: u32,
    now: Millis,
    nodes: &[Node],
    free: &[BTreeSet<u32>],
    holders: &[Vec<(u32, Option<Millis>)>],
) -> Option<Reservation> {
    let mut best: Option<Reservation> = None;
    for (node, info) in nodes.iter().enumerate() {
        if (info.gpus.len() as u32) < gpus {
            continue;
        }
        let mut ending: Vec<(u32, Option<Millis>)> = holders[node]
            .iter()
            .copied()
            .filter(|(g, _)| *g > 0)
            .collect();
        // Unknown ends (no time limit) sort last.
        ending.sort_by_key(|(_, end)| (end.is_none(), end.unwrap_or(Millis::MAX)));
        let mut available = free[node].len() as u32;
        let mut start = Some(now);
        for (held, end) in ending {
            if available >= gpus {
                break;
            }
            available += held;
            start = end;
        }
        let candidate = Reservation {
            node,
            start,
            spare_gpus: available.saturating_sub(gpus),
        };
        let better = match &best {
            None => true,
            Some(b) => match (candidate.start, b.start) {
                (Some(c), Some(bs)) => c < bs,
                (Some(_), None) => true,
                _ => false,
            },
        };
        if better {
            best = Some(candidate);
        }
    }
    best
}

#[cfg(test)]
mod tests;
