//! The event loop: arrivals and completions on a virtual clock, and at each
//! event one pass of the daemon's scheduler core (`gpuq_core::schedule`) over
//! the waiting jobs in the policy's order.

use crate::cluster::Cluster;
use crate::trace::TraceJob;
use gpuq_core::scheduler::las::{self, TIRESIAS_THRESHOLDS};
use gpuq_core::scheduler::{can_ever_place, schedule_with_kinds, NodeKinds, Policy};
use gpuq_core::{
    schedule, Decision, DependencyState, JobId, Millis, Node, PendingJob, Priority, RunningJob,
    ScheduleInput,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

mod queue;
use queue::{Key, Queue};

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
    /// Work lost by each preemption (Tiresias's, or of a trace's preemptible
    /// jobs): checkpoint, restart, warm-up.
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
}

pub fn run(trace: &[TraceJob], opts: &SimOptions) -> Run {
    let total_gpus = opts.cluster.total_gpus();
    let nodes: Vec<Node> = opts.cluster.nodes();
    // The nodes never change: group them by kind once, not in every pass.
    let kinds = NodeKinds::of(&nodes);
    // Whether jobs of a size can ever be placed (the core fails the others): by size, once.
    let mut placeable: HashMap<u32, bool> = HashMap::new();
    // Users by number (each job's user index), and each user's name once.
    let (user_of, user_names) = number_users(trace);
    let ms = |s: f64| (s * 1000.0).round() as Millis;
    let mut outcomes: Vec<Option<Outcome>> = vec![None; trace.len()];
    // Per job, numbered like the trace: submitted and not finished.
    let mut active: Vec<Option<Active>> = (0..trace.len()).map(|_| None).collect();
    // Waiting jobs in the policy's order.
    let mut queue = Queue::new(trace.len(), user_names.len());
    let mut running = RunningSet::default();
    let mut ends: BinaryHeap<Reverse<(Millis, JobId)>> = BinaryHeap::new();
    // Tiresias: when each running job crosses its queue's threshold (time,
    // job, the run's start: an entry of an earlier run is stale).
    let mut crossings: BinaryHeap<Reverse<(Millis, JobId, Millis)>> = BinaryHeap::new();
    // Tiresias: when each preempted job is due for promotion (time, job, its
    // preemption count then: a later preemption makes the entry stale).
    let mut promotions: BinaryHeap<Reverse<(Millis, JobId, u32)>> = BinaryHeap::new();
    // Tiresias: when each run's service quantum is over (time, job, the run's start).
    let mut protections: BinaryHeap<Reverse<(Millis, JobId, Millis)>> = BinaryHeap::new();
    let tiresias = opts.policy == PolicyName::Tiresias;
    let quantum = ms(opts.las_quantum_s);
    let mut policy = Policy {
        default_user_max_gpus: opts.user_max_gpus,
        strict_order: opts.policy == PolicyName::Fifo,
        ..Default::default()
    };
    // Fair share: usage decayed to a fixed origin, as the daemon's ledger does
    // (`None`: the user has finished nothing yet).
    let mut usage: Vec<Option<f64>> = vec![None; user_names.len()];
    // Each user's standing in this pass (empty until someone has usage).
    let mut standing: Vec<f64> = Vec::new();
    let decay = |t: Millis| 2f64.powf(t as f64 / 1000.0 / opts.half_life_s);
    let mut allocation = Vec::new();
    let mut next_sample: Millis = 0;
    let mut allocated: u32 = 0;
    let mut passes = 0u64;
    let mut next_arrival = 0usize;
    let mut last_now: Millis = Millis::MIN;
    let no_deps = |_: JobId| DependencyState::Succeeded;
    let key_of = |id: JobId, attained: f64| -> Key {
        let submit = ms(trace[id as usize].submit_s);
        match opts.policy {
            PolicyName::SjfOracle => (ms(trace[id as usize].duration_s), submit, id),
            PolicyName::Tiresias => (
                las::queue_of(attained, &TIRESIAS_THRESHOLDS) as i64,
                submit,
                id,
            ),
            _ => (-(trace[id as usize].priority as i64), submit, id),
        }
    };
    // Tiresias re-ranks when a running job crosses its queue's threshold.
    let crossing_of = |id: JobId, a: &Active| -> Option<Millis> {
        let gpus = trace[id as usize].gpus.max(1) as f64;
        let q = las::queue_of(a.attained_gpu_s, &TIRESIAS_THRESHOLDS);
        let threshold = *TIRESIAS_THRESHOLDS.get(q)?;
        Some(a.run_start? + ms((threshold - a.attained_gpu_s) / gpus))
    };

    loop {
        let arrival = trace.get(next_arrival).map(|j| ms(j.submit_s));
        let end = ends.peek().map(|Reverse((t, _))| *t);
        let crossing = first_current(&mut crossings, &active, last_now);
        let unprotect = first_current(&mut protections, &active, last_now);
        let promote = promotions.peek().map(|Reverse((t, _, _))| *t);
        let Some(now) = [arrival, end, crossing, unprotect, promote]
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
            let Some(a) = active[id as usize].as_mut() else {
                continue;
            };
            if a.run_start.is_some() || a.preemptions != n {
                continue;
            }
            let old = key_of(id, a.attained_gpu_s);
            a.attained_gpu_s = 0.0;
            let new = key_of(id, 0.0);
            if old != new {
                queue.rekey(old, new, user_of[id as usize], las_class(0));
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
            let ends_now = active[id as usize]
                .as_ref()
                .and_then(|a| a.run_start.map(|s| s + a.remaining_ms))
                == Some(t);
            if !ends_now {
                continue;
            }
            let r = running.remove(id).expect("running");
            allocated -= r.placement.gpu_count();
            let a = active[id as usize].take().expect("active");
            let j = &trace[id as usize];
            let used = j.gpus as f64 * (t - a.run_start.unwrap_or(t)) as f64 / 1000.0;
            *usage[user_of[id as usize]].get_or_insert(0.0) += used * decay(t);
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
            let mut pending = pending_of(id, j, &user_names[user_of[id as usize]], submit);
            if tiresias {
                pending.priority = las_class(0);
            }
            let fits = *placeable
                .entry(j.gpus)
                .or_insert_with(|| can_ever_place(&pending, &nodes));
            if !fits {
                continue; // never fits the cluster: left out of the figures (counted apart)
            }
            active[id as usize] = Some(Active {
                remaining_ms: ms(j.duration_s).max(1),
                run_start: None,
                attained_gpu_s: 0.0,
                first_start: None,
                preemptions: 0,
                nodes: 0,
                waiting_since: Some(submit),
                waited_ms: 0,
            });
            queue.insert(key_of(id, 0.0), user_of[id as usize], pending);
            arrived = true;
        }
        // Tiresias preempts: a pass is worth it on a full cluster when a
        // waiting job outranks a running one past its quantum.
        let may_preempt = if tiresias {
            (promoted || arrived || crossing == Some(now) || unprotect == Some(now))
                && las_may_preempt(now, trace, &active, &running, &queue, quantum)
        } else {
            // The daemon's rule: a waiting job of a higher class than a
            // preemptible running one (the trace's `preemptible` column).
            arrived && class_may_preempt(&running, &queue)
        };
        if allocated >= total_gpus && !freed && !promoted && !may_preempt {
            continue; // nothing can start: skip the pass
        }
        if queue.is_empty() {
            continue;
        }
        if opts.policy == PolicyName::Gpuq && usage.iter().any(Option::is_some) {
            let now_decay = decay(now);
            standing.clear();
            standing.extend(usage.iter().map(|u| u.unwrap_or(0.0) / now_decay));
            policy.standing.clear();
            for (u, used) in usage.iter().enumerate() {
                if let Some(used) = used {
                    policy
                        .standing
                        .insert(user_names[u].clone(), used / now_decay);
                }
            }
        }
        // Each preemption frees GPUs for a job of a higher class at this
        // instant: pass again until one preempts nothing (bounded for safety).
        for _ in 0..=2 * total_gpus + 16 {
            if queue.is_empty() {
                break;
            }
            if tiresias {
                las_refresh(now, trace, &active, &mut running, quantum);
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
                schedule(&input, queue.in_order())
            } else {
                schedule_with_kinds(
                    &input,
                    queue.candidates(&policy, &standing, total_gpus - allocated, |id| {
                        trace[id as usize].gpus
                    }),
                    &kinds,
                )
            };
            let mut preempted = false;
            for d in decisions {
                match d {
                    Decision::Start { job, placement } => {
                        let a = active[job as usize].as_mut().expect("active");
                        let key = key_of(job, a.attained_gpu_s);
                        let p = queue.remove(key, user_of[job as usize]).expect("queued");
                        a.run_start = Some(now);
                        a.first_start.get_or_insert(now);
                        if let Some(w) = a.waiting_since.take() {
                            a.waited_ms += now - w;
                        }
                        a.nodes = a.nodes.max(placement.0.len() as u32);
                        allocated += placement.gpu_count();
                        ends.push(Reverse((now + a.remaining_ms, job)));
                        if tiresias {
                            if let Some(t) = crossing_of(job, a) {
                                crossings.push(Reverse((t, job, now)));
                            }
                            if quantum > 0 {
                                protections.push(Reverse((now + quantum, job, now)));
                            }
                        }
                        running.insert(RunningJob {
                            id: job,
                            user: p.user,
                            project: None,
                            placement,
                            ends_by: None,
                            priority: p.priority,
                            // Tiresias sets it from the quantum before each pass.
                            preemptible: !tiresias && trace[job as usize].preemptible,
                            stopping: false,
                            group: None,
                        });
                    }
                    Decision::Preempt { job, .. } => {
                        let r = running.remove(job).expect("a victim runs");
                        allocated -= r.placement.gpu_count();
                        let a = active[job as usize].as_mut().expect("active");
                        let due = a.preempt(now, trace[job as usize].gpus, opts);
                        let user = user_of[job as usize];
                        let j = &trace[job as usize];
                        let mut p = pending_of(job, j, &user_names[user], ms(j.submit_s));
                        if tiresias {
                            if let Some(due) = due {
                                promotions.push(Reverse((due, job, a.preemptions)));
                            }
                            p.priority =
                                las_class(las::queue_of(a.attained_gpu_s, &TIRESIAS_THRESHOLDS));
                        }
                        queue.insert(key_of(job, a.attained_gpu_s), user, p);
                        preempted = true;
                    }
                    Decision::Fail { .. } => {} // never: unplaceable jobs are left out on arrival
                }
            }
            if !preempted {
                break;
            }
        }
    }
    Run {
        outcomes,
        allocation,
        total_gpus,
        passes,
    }
}

/// Each job's user as a number, and the users' names (each once).
fn number_users(trace: &[TraceJob]) -> (Vec<usize>, Vec<Arc<str>>) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<Arc<str>> = Vec::new();
    let of = trace
        .iter()
        .map(|j| {
            *index.entry(&j.user).or_insert_with(|| {
                names.push(Arc::from(j.user.as_str()));
                names.len() - 1
            })
        })
        .collect();
    (of, names)
}

fn pending_of(id: JobId, j: &TraceJob, user: &Arc<str>, submit: Millis) -> PendingJob {
    PendingJob {
        id,
        user: user.clone(),
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

/// Tiresias's queues as the core's priority classes (the core preempts only
/// for a strictly higher class): queue 0, the highest, is `High`.
fn las_class(queue: usize) -> Priority {
    const _: () = assert!(
        TIRESIAS_THRESHOLDS.len() < 3,
        "three classes hold three queues"
    );
    match queue {
        0 => Priority::High,
        1 => Priority::Normal,
        _ => Priority::Low,
    }
}

/// A running job's attained service (GPU-seconds) at `now`.
fn attained_at(now: Millis, gpus: u32, a: &Active) -> f64 {
    a.attained_gpu_s
        + a.run_start
            .map_or(0.0, |s| gpus as f64 * (now - s) as f64 / 1000.0)
}

/// The time of the first current event in a heap of (time, job, run start):
/// entries already handled (at or before `last_now`) and entries of runs
/// that have since ended are dropped.
fn first_current(
    heap: &mut BinaryHeap<Reverse<(Millis, JobId, Millis)>>,
    active: &[Option<Active>],
    last_now: Millis,
) -> Option<Millis> {
    while let Some(Reverse((t, id, since))) = heap.peek().copied() {
        let current = active[id as usize]
            .as_ref()
            .is_some_and(|a| a.run_start == Some(since));
        if t > last_now && current {
            return Some(t);
        }
        heap.pop();
    }
    None
}

/// The daemon's preemption can only help when the first waiting job's class
/// is above a preemptible running job's (its key's class is the negated
/// priority for the order-by-class policies).
fn class_may_preempt(running: &RunningSet, queue: &Queue) -> bool {
    let Some(head) = queue.first_job() else {
        return false;
    };
    running
        .as_slice()
        .iter()
        .any(|r| r.preemptible && r.priority < head.priority)
}

/// Preemption can only help when a waiting job's queue is better than that
/// of a running job past its quantum (cheap to check).
fn las_may_preempt(
    now: Millis,
    trace: &[TraceJob],
    active: &[Option<Active>],
    running: &RunningSet,
    queue: &Queue,
    quantum: Millis,
) -> bool {
    let Some(&(best_waiting, _, _)) = queue.first() else {
        return false;
    };
    running.ids().any(|id| {
        let a = active[id as usize].as_ref().expect("running is active");
        if a.run_start.is_some_and(|s| now - s < quantum) {
            return false; // within its service quantum
        }
        let attained = attained_at(now, trace[id as usize].gpus, a);
        las::queue_of(attained, &TIRESIAS_THRESHOLDS) as i64 > best_waiting
    })
}

/// Brings each running job's class (its queue at `now`) and whether it may
/// be preempted (past its quantum) up to date for the core's preemption.
fn las_refresh(
    now: Millis,
    trace: &[TraceJob],
    active: &[Option<Active>],
    running: &mut RunningSet,
    quantum: Millis,
) {
    for r in running.jobs.iter_mut() {
        let a = active[r.id as usize].as_ref().expect("running is active");
        let attained = attained_at(now, trace[r.id as usize].gpus, a);
        r.priority = las_class(las::queue_of(attained, &TIRESIAS_THRESHOLDS));
        r.preemptible = a.run_start.is_none_or(|s| now - s >= quantum);
    }
}

impl Active {
    /// Stops the job's run at `now`: the run counts as attained service and
    /// the restart penalty is added to its work. Returns when PROMOTEKNOB
    /// promotes it if it still waits then.
    fn preempt(&mut self, now: Millis, gpus: u32, opts: &SimOptions) -> Option<Millis> {
        let start = self.run_start.take().expect("a victim has a start");
        let ran = now - start;
        self.attained_gpu_s += gpus as f64 * ran as f64 / 1000.0;
        self.remaining_ms =
            (self.remaining_ms - ran).max(1) + (opts.restart_penalty_s * 1000.0).round() as Millis;
        self.preemptions += 1;
        self.waiting_since = Some(now);
        las::promotion_due(now, ran, opts.las_promote_knob)
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
