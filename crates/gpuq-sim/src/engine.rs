//! The event loop: arrivals and completions on a virtual clock, and at each
//! event one pass of the daemon's scheduler core (`gpuq_core::schedule`) over
//! the waiting jobs in the policy's order.

use crate::cluster::Cluster;
use crate::trace::TraceJob;
use gpuq_core::scheduler::las::{self, LasJob, TIRESIAS_THRESHOLDS};
use gpuq_core::scheduler::{can_ever_place, schedule_with_kinds, NodeKinds, Policy};
use gpuq_core::{
    schedule, Decision, DependencyState, JobId, Millis, Node, PendingJob, RunningJob, ScheduleInput,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyName {
    /// First come, first served; the first job that cannot start blocks the rest.
    Fifo,
    /// gpuq's own: priority class, then fair share (decayed GPU-time per user),
    /// then submit order, with EASY backfill. What the daemon runs.
    Gpuq,
    /// Shortest job first, knowing every job's duration in advance: an oracle,
    /// a bound no real scheduler reaches.
    SjfOracle,
    /// Tiresias's discretised 2D-LAS: preemptive, needs no durations.
    Tiresias,
}

impl std::str::FromStr for PolicyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(PolicyName::Fifo),
            "gpuq" => Ok(PolicyName::Gpuq),
            "sjf-oracle" | "sjf" => Ok(PolicyName::SjfOracle),
            "tiresias" | "las" => Ok(PolicyName::Tiresias),
            _ => Err(format!(
                "policy {s:?}: use fifo, gpuq, sjf-oracle or tiresias"
            )),
        }
    }
}

impl PolicyName {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Fifo => "fifo",
            PolicyName::Gpuq => "gpuq",
            PolicyName::SjfOracle => "sjf-oracle",
            PolicyName::Tiresias => "tiresias",
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub cluster: Cluster,
    pub policy: PolicyName,
    /// Fair-share half-life (gpuq policy), seconds.
    pub half_life_s: f64,
    /// Most GPUs one user (group) may hold at once (what-if quotas).
    pub user_max_gpus: Option<u32>,
    /// Work lost by each preemption (Tiresias): checkpoint, restart, warm-up.
    pub restart_penalty_s: f64,
    /// Tiresias: seconds a job keeps its GPUs after each (re)start before it
    /// can be preempted again (the minimum service quantum; 0: none).
    pub las_quantum_s: f64,
    /// Tiresias's PROMOTEKNOB: a preempted job that has waited this many times
    /// its last run is promoted to the highest queue (0: never).
    pub las_promote_knob: f64,
    /// Sampling period of the allocation ratio, seconds.
    pub sample_every_s: f64,
    /// Pass the whole queue to every pass instead of the jobs that could start
    /// (slow; for checking that the shortcut changes no decision).
    pub full_passes: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            cluster: Cluster::uniform(16, 4),
            policy: PolicyName::Gpuq,
            half_life_s: 7.0 * 86_400.0,
            user_max_gpus: None,
            restart_penalty_s: 30.0,
            las_quantum_s: 600.0,
            las_promote_knob: 8.0,
            sample_every_s: 3600.0,
            full_passes: false,
        }
    }
}

/// One job's fate in a run.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub submit: Millis,
    pub first_start: Millis,
    pub end: Millis,
    pub gpus: u32,
    pub duration_ms: Millis,
    pub preemptions: u32,
    /// The most nodes it ran on at once (1 for a job that fits on one).
    pub nodes: u32,
    /// Every wait: from submit to the first start, and after each
    /// preemption to the restart.
    pub waited_ms: Millis,
}

pub struct Run {
    /// Indexed like the trace; jobs that can never be placed on the cluster are `None`.
    pub outcomes: Vec<Option<Outcome>>,
    /// (time, allocated GPUs) samples every `sample_every_s`.
    pub allocation: Vec<(Millis, u32)>,
    pub total_gpus: u32,
    pub passes: u64,
}

struct Active {
    remaining_ms: Millis,
    /// When the current run started (running jobs).
    run_start: Option<Millis>,
    attained_gpu_s: f64,
    first_start: Option<Millis>,
    preemptions: u32,
    nodes: u32,
    /// Since when it waits (submit, or its last preemption); `None` while running.
    waiting_since: Option<Millis>,
    waited_ms: Millis,
    /// Length of its last run before a preemption (PROMOTEKNOB).
    last_run_ms: Millis,
}

pub fn run(trace: &[TraceJob], opts: &SimOptions) -> Run {
    let total_gpus = opts.cluster.total_gpus();
    let nodes: Vec<Node> = opts.cluster.nodes();
    // The nodes never change: group them by kind once, not in every pass.
    let kinds = NodeKinds::of(&nodes);
    // Whether jobs of a size can ever be placed (the core fails the others): by size, once.
    let mut placeable: HashMap<u32, bool> = HashMap::new();
    let users: Vec<Arc<str>> = {
        let mut names: HashMap<&str, Arc<str>> = HashMap::new();
        trace
            .iter()
            .map(|j| {
                names
                    .entry(&j.user)
                    .or_insert_with(|| Arc::from(j.user.as_str()))
                    .clone()
            })
            .collect()
    };
    let ms = |s: f64| (s * 1000.0).round() as Millis;
    let mut outcomes: Vec<Option<Outcome>> = vec![None; trace.len()];
    let mut active: HashMap<JobId, Active> = HashMap::new();
    // Waiting jobs in the policy's order.
    let mut queue: BTreeMap<(i64, Millis, JobId), PendingJob> = BTreeMap::new();
    // The same keys per user (gpuq's fair-share order merges users' queues).
    let mut by_user: HashMap<Arc<str>, BTreeSet<(i64, Millis, JobId)>> = HashMap::new();
    let mut running = RunningSet::default();
    let mut ends: BinaryHeap<Reverse<(Millis, JobId)>> = BinaryHeap::new();
    // Tiresias: when each preempted job is due for promotion (time, job, its
    // preemption count then: a later preemption makes the entry stale).
    let mut promotions: BinaryHeap<Reverse<(Millis, JobId, u32)>> = BinaryHeap::new();
    let mut policy = Policy {
        default_user_max_gpus: opts.user_max_gpus,
        strict_order: opts.policy == PolicyName::Fifo,
        ..Default::default()
    };
    // Fair share: usage decayed to a fixed origin, as the daemon's ledger does.
    let mut usage: HashMap<Arc<str>, f64> = HashMap::new();
    let decay = |t: Millis| 2f64.powf(t as f64 / 1000.0 / opts.half_life_s);
    let mut allocation = Vec::new();
    let mut next_sample: Millis = 0;
    let mut allocated: u32 = 0;
    let mut passes = 0u64;
    let mut next_arrival = 0usize;
    let mut last_now: Millis = Millis::MIN;
    let no_deps = |_: JobId| DependencyState::Succeeded;
    let key_of =
        |id: JobId, policy: PolicyName, submit: Millis, attained: f64| -> (i64, Millis, JobId) {
            match policy {
                PolicyName::SjfOracle => (ms(trace[id as usize].duration_s), submit, id),
                PolicyName::Tiresias => (
                    las::queue_of(attained, &TIRESIAS_THRESHOLDS) as i64,
                    submit,
                    id,
                ),
                _ => (-(trace[id as usize].priority as i64), submit, id),
            }
        };

    loop {
        let arrival = trace.get(next_arrival).map(|j| ms(j.submit_s));
        let end = ends.peek().map(|Reverse((t, _))| *t);
        // Tiresias re-ranks when a running job crosses a queue threshold.
        let crossing = if opts.policy == PolicyName::Tiresias {
            running
                .ids()
                .filter_map(|id| {
                    let a = &active[&id];
                    let gpus = trace[id as usize].gpus.max(1) as f64;
                    let q = las::queue_of(a.attained_gpu_s, &TIRESIAS_THRESHOLDS);
                    let threshold = *TIRESIAS_THRESHOLDS.get(q)?;
                    let since = a.run_start?;
                    Some(since + ms((threshold - a.attained_gpu_s) / gpus))
                })
                // A crossing already handled is in the past: only later ones are events.
                .filter(|t| *t > last_now)
                .min()
        } else {
            None
        };
        let promote = promotions.peek().map(|Reverse((t, _, _))| *t);
        let Some(now) = [arrival, end, crossing, promote]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        last_now = now;
        // PROMOTEKNOB: a job starved long enough is back in the highest queue
        // (its attained service starts again from 0).
        let mut promoted = false;
        while let Some(Reverse((t, id, n))) = promotions.peek().copied() {
            if t > now {
                break;
            }
            promotions.pop();
            let Some(a) = active.get_mut(&id) else {
                continue;
            };
            if a.run_start.is_some() || a.preemptions != n {
                continue;
            }
            let submit = ms(trace[id as usize].submit_s);
            let old = key_of(id, opts.policy, submit, a.attained_gpu_s);
            a.attained_gpu_s = 0.0;
            let new = key_of(id, opts.policy, submit, 0.0);
            if old != new {
                if let Some(p) = queue.remove(&old) {
                    queue.insert(new, p);
                }
                if let Some(keys) = by_user.get_mut(&users[id as usize]) {
                    keys.remove(&old);
                    keys.insert(new);
                }
                promoted = true;
            }
        }
        while next_sample <= now {
            allocation.push((next_sample, allocated));
            next_sample += ms(opts.sample_every_s);
        }
        let mut freed = false;
        while let Some(Reverse((t, id))) = ends.peek().copied() {
            if t > now {
                break;
            }
            ends.pop();
            // A stale end (the job was preempted since) is skipped.
            if running.get(id).is_none()
                || active[&id].run_start.map(|s| s + active[&id].remaining_ms) != Some(t)
            {
                continue;
            }
            let r = running.remove(id).expect("running");
            allocated -= r.placement.gpu_count();
            let a = active.remove(&id).expect("active");
            let j = &trace[id as usize];
            let used = j.gpus as f64 * (t - a.run_start.unwrap_or(t)) as f64 / 1000.0;
            *usage.entry(users[id as usize].clone()).or_default() += used * decay(t);
            outcomes[id as usize] = Some(Outcome {
                submit: ms(j.submit_s),
                first_start: a.first_start.unwrap_or(t),
                end: t,
                gpus: j.gpus,
                duration_ms: ms(j.duration_s),
                preemptions: a.preemptions,
                nodes: a.nodes,
                waited_ms: a.waited_ms,
            });
            freed = true;
        }
        let mut arrived = false;
        while let Some(j) = trace.get(next_arrival) {
            if ms(j.submit_s) > now {
                break;
            }
            let id = next_arrival as JobId;
            next_arrival += 1;
            let submit = ms(j.submit_s);
            let pending = pending_of(id, j, &users, submit);
            let fits = *placeable
                .entry(j.gpus)
                .or_insert_with(|| can_ever_place(&pending, &nodes));
            if !fits {
                continue; // never fits the cluster: left out of the figures (counted apart)
            }
            active.insert(
                id,
                Active {
                    remaining_ms: ms(j.duration_s).max(1),
                    run_start: None,
                    attained_gpu_s: 0.0,
                    first_start: None,
                    preemptions: 0,
                    nodes: 0,
                    waiting_since: Some(submit),
                    waited_ms: 0,
                    last_run_ms: 0,
                },
            );
            let key = key_of(id, opts.policy, submit, 0.0);
            by_user
                .entry(users[id as usize].clone())
                .or_default()
                .insert(key);
            queue.insert(key, pending);
            arrived = true;
        }
        if opts.policy == PolicyName::Tiresias
            && (promoted
                || ((crossing == Some(now) || arrived || freed)
                    && las_may_preempt(now, trace, &active, &running, &queue, opts)))
        {
            preempt_for_las(
                now,
                trace,
                &mut active,
                &mut running,
                &mut queue,
                &mut by_user,
                &mut allocated,
                opts,
                &users,
                key_of,
                &mut promotions,
            );
        }
        if allocated >= total_gpus && !freed && !promoted {
            continue; // nothing can start: skip the pass
        }
        if queue.is_empty() {
            continue;
        }
        if opts.policy == PolicyName::Gpuq {
            let now_decay = decay(now);
            policy.standing = usage
                .iter()
                .map(|(u, v)| (u.clone(), v / now_decay))
                .collect();
        }
        let input = ScheduleInput {
            now,
            nodes: &nodes,
            running: running.as_slice(),
            dependency: &no_deps,
            drained: false,
            policy: &policy,
        };
        passes += 1;
        let decisions = if opts.full_passes {
            schedule(&input, queue.values())
        } else {
            schedule_with_kinds(
                &input,
                candidates(&queue, &by_user, &policy, total_gpus - allocated, |id| {
                    trace[id as usize].gpus
                }),
                &kinds,
            )
        };
        for d in decisions {
            let Decision::Start { job, placement } = d else {
                continue;
            };
            let a = active.get_mut(&job).expect("active");
            let key = key_of(
                job,
                opts.policy,
                ms(trace[job as usize].submit_s),
                a.attained_gpu_s,
            );
            let p = queue.remove(&key).expect("queued");
            if let Some(keys) = by_user.get_mut(&p.user) {
                keys.remove(&key);
            }
            a.run_start = Some(now);
            a.first_start.get_or_insert(now);
            if let Some(w) = a.waiting_since.take() {
                a.waited_ms += now - w;
            }
            a.nodes = a.nodes.max(placement.0.len() as u32);
            allocated += placement.gpu_count();
            ends.push(Reverse((now + a.remaining_ms, job)));
            running.insert(RunningJob {
                id: job,
                user: p.user,
                project: None,
                placement,
                ends_by: None,
                priority: p.priority,
                preemptible: false,
                stopping: false,
                group: None,
            });
        }
    }
    Run {
        outcomes,
        allocation,
        total_gpus,
        passes,
    }
}

/// The waiting jobs a pass needs to see, in the policy's order: those that fit
/// the free GPUs by count, up to twice the free GPUs plus 16 of them (each start
/// takes at least one GPU; the margin covers jobs that fit by count but not on
/// one node, or not on whole nodes of one kind), and the first that does not
/// fit (it holds the backfill reservation). Strict FIFO needs only the prefix up to the first blocked job.
/// The jobs left out cannot start in this pass, so the decisions are the
/// core's on the whole queue, at a fraction of the cost on deep queues.
fn candidates<'q>(
    queue: &'q BTreeMap<(i64, Millis, JobId), PendingJob>,
    by_user: &HashMap<Arc<str>, BTreeSet<(i64, Millis, JobId)>>,
    policy: &Policy,
    free: u32,
    gpus_of: impl Fn(JobId) -> u32,
) -> Vec<&'q PendingJob> {
    let limit = 2 * free as usize + 16;
    // Keys, not jobs: most keys walked are of jobs too big for the free GPUs,
    // skipped on their size alone without looking the job up.
    type Key = (i64, Millis, JobId);
    let ordered: Box<dyn Iterator<Item = Key> + '_> = if policy.standing.is_empty() {
        Box::new(queue.keys().copied())
    } else {
        // gpuq's order: priority class, then lower fair-share standing, then submit
        // order (the core's `fair_share_order`). Each user's run of the queue is
        // already in (class, submit) order and a user's standing is one number, so a
        // k-way merge of the runs yields the same order without sorting the queue.
        let standing = |u: &str| {
            policy
                .standing
                .get(u)
                .copied()
                .unwrap_or(0.0)
                .max(0.0)
                .to_bits()
        };
        let mut runs: Vec<_> = by_user
            .iter()
            .map(|(u, keys)| (standing(u), keys.iter()))
            .collect();
        let mut heap = BinaryHeap::new();
        for (i, (st, it)) in runs.iter_mut().enumerate() {
            if let Some(k) = it.next() {
                heap.push(Reverse((k.0, *st, k.1, k.2, i)));
            }
        }
        Box::new(std::iter::from_fn(move || {
            let Reverse((class, st, submit, id, i)) = heap.pop()?;
            if let Some(k) = runs[i].1.next() {
                heap.push(Reverse((k.0, st, k.1, k.2, i)));
            }
            Some((class, submit, id))
        }))
    };
    let mut out = Vec::new();
    let mut fitting = 0usize;
    let mut big_seen = false;
    let mut used = 0u32;
    for key in ordered {
        let gpus = gpus_of(key.2);
        // A placement holds at least the GPUs asked for (whole nodes may round up).
        if gpus <= free {
            // Jobs after this point come after every job passed: no reservation
            // made for a later big job could change what these do.
            if fitting >= limit {
                break;
            }
            fitting += 1;
            used = used.saturating_add(gpus);
            out.push(&queue[&key]);
            if policy.strict_order && used > free {
                break;
            }
        } else if !big_seen {
            big_seen = true;
            out.push(&queue[&key]);
            if policy.strict_order {
                break;
            }
        }
        if fitting >= limit && big_seen {
            break;
        }
    }
    out
}

fn pending_of(id: JobId, j: &TraceJob, users: &[Arc<str>], submit: Millis) -> PendingJob {
    PendingJob {
        id,
        user: users[id as usize].clone(),
        project: None,
        priority: j.priority,
        submitted_at: submit,
        gpus: j.gpus,
        nodes: None,
        time_limit_ms: None,
        after: vec![],
        held: false,
        eligible_at: None,
        gpu_type: None,
        gpu_mem_mib: None,
        group: None,
        waits_on: None,
    }
}

/// Preemption can only help when a waiting job ranks above a running one: the
/// best waiting queue is better than the worst running job's (cheap to check).
fn las_may_preempt(
    now: Millis,
    trace: &[TraceJob],
    active: &HashMap<JobId, Active>,
    running: &RunningSet,
    queue: &BTreeMap<(i64, Millis, JobId), PendingJob>,
    opts: &SimOptions,
) -> bool {
    let Some(((best_waiting, _, _), _)) = queue.first_key_value() else {
        return false;
    };
    let quantum = (opts.las_quantum_s * 1000.0).round() as Millis;
    running.ids().any(|id| {
        let a = &active[&id];
        if a.run_start.is_some_and(|s| now - s < quantum) {
            return false; // within its service quantum
        }
        let gpus = trace[id as usize].gpus as f64;
        let attained = a.attained_gpu_s
            + a.run_start
                .map_or(0.0, |s| gpus * (now - s) as f64 / 1000.0);
        las::queue_of(attained, &TIRESIAS_THRESHOLDS) as i64 > *best_waiting
    })
}

/// Tiresias: running jobs that 2D-LAS no longer keeps are preempted (their run so
/// far counts as attained service; the restart penalty is added to their work).
#[allow(clippy::too_many_arguments)]
fn preempt_for_las(
    now: Millis,
    trace: &[TraceJob],
    active: &mut HashMap<JobId, Active>,
    running: &mut RunningSet,
    queue: &mut BTreeMap<(i64, Millis, JobId), PendingJob>,
    by_user: &mut HashMap<Arc<str>, BTreeSet<(i64, Millis, JobId)>>,
    allocated: &mut u32,
    opts: &SimOptions,
    users: &[Arc<str>],
    key_of: impl Fn(JobId, PolicyName, Millis, f64) -> (i64, Millis, JobId),
    promotions: &mut BinaryHeap<Reverse<(Millis, JobId, u32)>>,
) {
    let ms = |s: f64| (s * 1000.0).round() as Millis;
    let quantum = ms(opts.las_quantum_s);
    // Bring running jobs' attained service up to now.
    let attained = |id: &JobId, a: &Active| {
        let gpus = trace[*id as usize].gpus as f64;
        a.attained_gpu_s
            + a.run_start
                .map_or(0.0, |s| gpus * (now - s) as f64 / 1000.0)
    };
    // Only the running jobs and the head of the waiting queue (already in 2D-LAS
    // order) can be among the first `capacity` GPUs' worth: the rest need not be ranked.
    // GPUs by count, the cluster's shape aside: a kept job may still find no room
    // (fragmentation, or no whole nodes of one kind for a multi-node job).
    let capacity = opts.cluster.total_gpus();
    let job = |id: JobId, gpus: u32| LasJob {
        id,
        gpus,
        attained_gpu_seconds: attained(&id, &active[&id]),
        submitted_at: ms(trace[id as usize].submit_s),
        protected: active[&id].run_start.is_some_and(|s| now - s < quantum),
    };
    // A running job counts the GPUs it holds (whole nodes may round up), a waiting one what it asks.
    let jobs: Vec<LasJob> = running
        .as_slice()
        .iter()
        .map(|r| job(r.id, r.placement.gpu_count()))
        .chain(
            queue
                .values()
                .take(capacity as usize)
                .map(|p| job(p.id, p.gpus)),
        )
        .collect();
    let keep: std::collections::HashSet<JobId> = las::keep(&jobs, capacity, &TIRESIAS_THRESHOLDS)
        .into_iter()
        .collect();
    let victims: Vec<JobId> = running.ids().filter(|id| !keep.contains(id)).collect();
    // Re-key waiting jobs whose queue changed is unnecessary: waiting jobs attain nothing.
    for id in victims {
        let r = running.remove(id).expect("running");
        *allocated -= r.placement.gpu_count();
        let a = active.get_mut(&id).expect("active");
        let start = a.run_start.take().expect("running has a start");
        let ran = now - start;
        a.attained_gpu_s += trace[id as usize].gpus as f64 * ran as f64 / 1000.0;
        a.remaining_ms = (a.remaining_ms - ran).max(1) + ms(opts.restart_penalty_s);
        a.preemptions += 1;
        a.waiting_since = Some(now);
        a.last_run_ms = ran;
        if opts.las_promote_knob > 0.0 {
            let due = now + (opts.las_promote_knob * ran as f64).round() as Millis;
            promotions.push(Reverse((due.max(now + 1), id, a.preemptions)));
        }
        let submit = ms(trace[id as usize].submit_s);
        let key = key_of(id, opts.policy, submit, a.attained_gpu_s);
        by_user
            .entry(users[id as usize].clone())
            .or_default()
            .insert(key);
        queue.insert(key, pending_of(id, &trace[id as usize], users, submit));
    }
}

/// The running jobs in id order (the pass sees them in the same order in every
/// run: determinism), kept as the slice the core takes, so no pass copies them.
#[derive(Default)]
struct RunningSet {
    jobs: Vec<RunningJob>,
}

impl RunningSet {
    fn as_slice(&self) -> &[RunningJob] {
        &self.jobs
    }
    fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.iter().map(|r| r.id)
    }
    fn get(&self, id: JobId) -> Option<&RunningJob> {
        let at = self.jobs.binary_search_by_key(&id, |r| r.id).ok()?;
        Some(&self.jobs[at])
    }
    fn insert(&mut self, job: RunningJob) {
        match self.jobs.binary_search_by_key(&job.id, |r| r.id) {
            Ok(at) => self.jobs[at] = job,
            Err(at) => self.jobs.insert(at, job),
        }
    }
    fn remove(&mut self, id: JobId) -> Option<RunningJob> {
        let at = self.jobs.binary_search_by_key(&id, |r| r.id).ok()?;
        Some(self.jobs.remove(at))
    }
}
