//! The event loop: arrivals and completions on a virtual clock, and at each
//! event one pass of the daemon's scheduler core (`gpuq_core::schedule`) over
//! the waiting jobs in the policy's order.

use crate::cluster::Cluster;
use crate::trace::TraceJob;
use gpuq_core::scheduler::las::{self, TIRESIAS_THRESHOLDS};
use gpuq_core::scheduler::{can_ever_place, schedule_with_kinds, NodeKinds, Policy};
use gpuq_core::{
    schedule, Decision, DependencyState, JobId, Millis, Node, PendingJob, Placement, Priority,
    RunningJob, ScheduleInput,
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
    let mut replay = Replay::new(trace, opts);
    while let Some(now) = replay.next_event() {
        replay.step(now);
    }
    Run {
        outcomes: replay.outcomes,
        allocation: replay.allocation,
        total_gpus: replay.total_gpus,
        passes: replay.passes,
    }
}

fn ms(s: f64) -> Millis {
    (s * 1000.0).round() as Millis
}

/// A replay in progress: the virtual clock's state between events.
struct Replay<'t> {
    trace: &'t [TraceJob],
    opts: &'t SimOptions,
    tiresias: bool,
    quantum: Millis,
    total_gpus: u32,
    nodes: Vec<Node>,
    /// The nodes never change: grouped by kind once, not in every pass.
    kinds: NodeKinds,
    /// Whether jobs of a size can ever be placed (the core fails the others): by size, once.
    placeable: HashMap<u32, bool>,
    /// Each job's user as a number, and each user's name once.
    user_of: Vec<usize>,
    user_names: Vec<Arc<str>>,
    outcomes: Vec<Option<Outcome>>,
    /// Per job, numbered like the trace: submitted and not finished.
    active: Vec<Option<Active>>,
    /// Waiting jobs in the policy's order.
    queue: Queue,
    running: RunningSet,
    ends: BinaryHeap<Reverse<(Millis, JobId)>>,
    /// Tiresias: when each running job crosses its queue's threshold (time,
    /// job, the run's start: an entry of an earlier run is stale).
    crossings: BinaryHeap<Reverse<(Millis, JobId, Millis)>>,
    /// Tiresias: when each run's service quantum is over (time, job, the run's start).
    protections: BinaryHeap<Reverse<(Millis, JobId, Millis)>>,
    /// Tiresias: when each preempted job is due for promotion (time, job, its
    /// preemption count then: a later preemption makes the entry stale).
    promotions: BinaryHeap<Reverse<(Millis, JobId, u32)>>,
    policy: Policy,
    /// Fair share: usage decayed to a fixed origin, as the daemon's ledger
    /// does (`None`: the user has finished nothing yet).
    usage: Vec<Option<f64>>,
    /// Each user's standing in this pass (empty until someone has usage).
    standing: Vec<f64>,
    allocation: Vec<(Millis, u32)>,
    next_sample: Millis,
    allocated: u32,
    passes: u64,
    next_arrival: usize,
    /// The previous event's time (crossings and quanta at or before it are handled).
    last_now: Millis,
    /// What the next event found: threshold crossings and quanta ending now.
    crossing: Option<Millis>,
    unprotect: Option<Millis>,
}

impl<'t> Replay<'t> {
    fn new(trace: &'t [TraceJob], opts: &'t SimOptions) -> Replay<'t> {
        let nodes = opts.cluster.nodes();
        let (user_of, user_names) = number_users(trace);
        Replay {
            trace,
            opts,
            tiresias: opts.policy == PolicyName::Tiresias,
            quantum: ms(opts.las_quantum_s),
            total_gpus: opts.cluster.total_gpus(),
            kinds: NodeKinds::of(&nodes),
            nodes,
            placeable: HashMap::new(),
            outcomes: vec![None; trace.len()],
            active: (0..trace.len()).map(|_| None).collect(),
            queue: Queue::new(trace.len(), user_names.len()),
            usage: vec![None; user_names.len()],
            user_of,
            user_names,
            running: RunningSet::default(),
            ends: BinaryHeap::new(),
            crossings: BinaryHeap::new(),
            protections: BinaryHeap::new(),
            promotions: BinaryHeap::new(),
            policy: Policy {
                default_user_max_gpus: opts.user_max_gpus,
                strict_order: opts.policy == PolicyName::Fifo,
                ..Default::default()
            },
            standing: Vec::new(),
            allocation: Vec::new(),
            next_sample: 0,
            allocated: 0,
            passes: 0,
            next_arrival: 0,
            last_now: Millis::MIN,
            crossing: None,
            unprotect: None,
        }
    }

    /// The job's place in the policy's order.
    fn key_of(&self, id: JobId, attained: f64) -> Key {
        let job = &self.trace[id as usize];
        let submit = ms(job.submit_s);
        match self.opts.policy {
            PolicyName::SjfOracle => (ms(job.duration_s), submit, id),
            PolicyName::Tiresias => (
                las::queue_of(attained, &TIRESIAS_THRESHOLDS) as i64,
                submit,
                id,
            ),
            _ => (-(job.priority as i64), submit, id),
        }
    }

    fn decay(&self, t: Millis) -> f64 {
        2f64.powf(t as f64 / 1000.0 / self.opts.half_life_s)
    }

    /// When the next event happens: an arrival, an end, a threshold
    /// crossing, a quantum ending or a promotion (`None`: the replay is over).
    fn next_event(&mut self) -> Option<Millis> {
        let arrival = self.trace.get(self.next_arrival).map(|j| ms(j.submit_s));
        let end = self.ends.peek().map(|Reverse((t, _))| *t);
        self.crossing = first_current(&mut self.crossings, &self.active, self.last_now);
        self.unprotect = first_current(&mut self.protections, &self.active, self.last_now);
        let promote = self.promotions.peek().map(|Reverse((t, _, _))| *t);
        [arrival, end, self.crossing, self.unprotect, promote]
            .into_iter()
            .flatten()
            .min()
    }

    /// Everything that happens at `now`, then the passes it calls for.
    fn step(&mut self, now: Millis) {
        self.last_now = now;
        let promoted = self.promote(now);
        while self.next_sample <= now {
            self.allocation.push((self.next_sample, self.allocated));
            self.next_sample += ms(self.opts.sample_every_s);
        }
        let freed = self.finish(now);
        let arrived = self.admit(now);
        let may_preempt = if self.tiresias {
            // A pass is worth it on a full cluster when a waiting job
            // outranks a running one past its quantum.
            (promoted || arrived || self.crossing == Some(now) || self.unprotect == Some(now))
                && las_may_preempt(
                    now,
                    self.trace,
                    &self.active,
                    &self.running,
                    &self.queue,
                    self.quantum,
                )
        } else {
            // The daemon's rule: a waiting job of a higher class than a
            // preemptible running one (the trace's `preemptible` column).
            arrived && class_may_preempt(&self.running, &self.queue)
        };
        if self.allocated >= self.total_gpus && !freed && !promoted && !may_preempt {
            return; // nothing can start: skip the pass
        }
        if self.queue.is_empty() {
            return;
        }
        if self.opts.policy == PolicyName::Gpuq && self.usage.iter().any(Option::is_some) {
            let now_decay = self.decay(now);
            self.standing.clear();
            self.standing
                .extend(self.usage.iter().map(|u| u.unwrap_or(0.0) / now_decay));
            self.policy.standing.clear();
            for (u, used) in self.usage.iter().enumerate() {
                if let Some(used) = used {
                    self.policy
                        .standing
                        .insert(self.user_names[u].clone(), used / now_decay);
                }
            }
        }
        // Each preemption frees GPUs for a job of a higher class at this
        // instant: pass again until one preempts nothing (bounded for safety).
        for _ in 0..=2 * self.total_gpus + 16 {
            if self.queue.is_empty() || !self.pass(now) {
                break;
            }
        }
    }

    /// PROMOTEKNOB: a job starved long enough is back in the highest queue
    /// (its attained service starts again from 0). Whether any was.
    fn promote(&mut self, now: Millis) -> bool {
        let mut promoted = false;
        while let Some(Reverse((t, id, n))) = self.promotions.peek().copied() {
            if t > now {
                break;
            }
            self.promotions.pop();
            let Some(a) = self.active[id as usize].as_ref() else {
                continue;
            };
            if a.run_start.is_some() || a.preemptions != n {
                continue;
            }
            let old = self.key_of(id, a.attained_gpu_s);
            let new = self.key_of(id, 0.0);
            if let Some(a) = self.active[id as usize].as_mut() {
                a.attained_gpu_s = 0.0;
            }
            if old != new {
                self.queue
                    .rekey(old, new, self.user_of[id as usize], las_class(0));
                promoted = true;
            }
        }
        promoted
    }

    /// The jobs whose run ends by `now`: their outcomes, their users' usage.
    /// Whether any GPU was freed.
    fn finish(&mut self, now: Millis) -> bool {
        let mut freed = false;
        while let Some(Reverse((t, id))) = self.ends.peek().copied() {
            if t > now {
                break;
            }
            self.ends.pop();
            // A stale end (the job was preempted since) is skipped.
            let ends_now = self.active[id as usize]
                .as_ref()
                .and_then(|a| a.run_start.map(|s| s + a.remaining_ms))
                == Some(t);
            if !ends_now {
                continue;
            }
            let r = self.running.remove(id).expect("running");
            self.allocated -= r.placement.gpu_count();
            let a = self.active[id as usize].take().expect("active");
            let j = &self.trace[id as usize];
            let used = j.gpus as f64 * (t - a.run_start.unwrap_or(t)) as f64 / 1000.0;
            let decayed = used * self.decay(t);
            *self.usage[self.user_of[id as usize]].get_or_insert(0.0) += decayed;
            self.outcomes[id as usize] = Some(Outcome {
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
        freed
    }

    /// The jobs submitted by `now` join the queue. Whether any did.
    fn admit(&mut self, now: Millis) -> bool {
        let mut arrived = false;
        while let Some(j) = self.trace.get(self.next_arrival) {
            if ms(j.submit_s) > now {
                break;
            }
            let id = self.next_arrival as JobId;
            self.next_arrival += 1;
            let submit = ms(j.submit_s);
            let user = self.user_of[id as usize];
            let mut pending = pending_of(id, j, &self.user_names[user], submit);
            if self.tiresias {
                pending.priority = las_class(0);
            }
            let nodes = &self.nodes;
            let fits = *self
                .placeable
                .entry(j.gpus)
                .or_insert_with(|| can_ever_place(&pending, nodes));
            if !fits {
                continue; // never fits the cluster: left out of the figures (counted apart)
            }
            self.active[id as usize] = Some(Active {
                remaining_ms: ms(j.duration_s).max(1),
                run_start: None,
                attained_gpu_s: 0.0,
                first_start: None,
                preemptions: 0,
                nodes: 0,
                waiting_since: Some(submit),
                waited_ms: 0,
            });
            let key = self.key_of(id, 0.0);
            self.queue.insert(key, user, pending);
            arrived = true;
        }
        arrived
    }

    /// One pass of the core over the jobs that could start; its starts and
    /// preemptions applied. Whether it preempted anything.
    fn pass(&mut self, now: Millis) -> bool {
        if self.tiresias {
            las_refresh(
                now,
                self.trace,
                &self.active,
                &mut self.running,
                self.quantum,
            );
        }
        let no_deps = |_: JobId| DependencyState::Succeeded;
        let input = ScheduleInput {
            now,
            nodes: &self.nodes,
            running: self.running.as_slice(),
            dependency: &no_deps,
            drained: false,
            policy: &self.policy,
        };
        self.passes += 1;
        let decisions = if self.opts.full_passes {
            schedule(&input, self.queue.in_order())
        } else {
            let free = self.total_gpus - self.allocated;
            let candidates = self.queue.candidates(&self.policy, &self.standing, free);
            schedule_with_kinds(&input, candidates, &self.kinds)
        };
        let mut preempted = false;
        for d in decisions {
            match d {
                Decision::Start { job, placement } => self.start(now, job, placement),
                Decision::Preempt { job, .. } => {
                    self.preempt(now, job);
                    preempted = true;
                }
                Decision::Fail { .. } => {} // never: unplaceable jobs are left out on arrival
            }
        }
        preempted
    }

    fn start(&mut self, now: Millis, job: JobId, placement: Placement) {
        let a = self.active[job as usize].as_ref().expect("active");
        let key = self.key_of(job, a.attained_gpu_s);
        let p = self
            .queue
            .remove(key, self.user_of[job as usize])
            .expect("queued");
        let a = self.active[job as usize].as_mut().expect("active");
        a.run_start = Some(now);
        a.first_start.get_or_insert(now);
        if let Some(w) = a.waiting_since.take() {
            a.waited_ms += now - w;
        }
        a.nodes = a.nodes.max(placement.0.len() as u32);
        self.allocated += placement.gpu_count();
        self.ends.push(Reverse((now + a.remaining_ms, job)));
        if self.tiresias {
            // Tiresias re-ranks when a running job crosses its queue's threshold.
            let gpus = self.trace[job as usize].gpus.max(1) as f64;
            let q = las::queue_of(a.attained_gpu_s, &TIRESIAS_THRESHOLDS);
            if let Some(threshold) = TIRESIAS_THRESHOLDS.get(q) {
                let t = now + ms((threshold - a.attained_gpu_s) / gpus);
                self.crossings.push(Reverse((t, job, now)));
            }
            if self.quantum > 0 {
                self.protections
                    .push(Reverse((now + self.quantum, job, now)));
            }
        }
        self.running.insert(RunningJob {
            id: job,
            user: p.user,
            project: None,
            placement,
            ends_by: None,
            priority: p.priority,
            // Tiresias sets it from the quantum before each pass.
            preemptible: !self.tiresias && self.trace[job as usize].preemptible,
            stopping: false,
            group: None,
            resources: p.resources,
        });
    }

    /// A running job stopped for another: back in the queue.
    fn preempt(&mut self, now: Millis, job: JobId) {
        let r = self.running.remove(job).expect("a victim runs");
        self.allocated -= r.placement.gpu_count();
        let j = &self.trace[job as usize];
        let a = self.active[job as usize].as_mut().expect("active");
        let due = a.preempt(now, j.gpus, self.opts);
        let (attained, preemptions) = (a.attained_gpu_s, a.preemptions);
        let user = self.user_of[job as usize];
        let mut p = pending_of(job, j, &self.user_names[user], ms(j.submit_s));
        if self.tiresias {
            if let Some(due) = due {
                self.promotions.push(Reverse((due, job, preemptions)));
            }
            p.priority = las_class(las::queue_of(attained, &TIRESIAS_THRESHOLDS));
        }
        let key = self.key_of(job, attained);
        self.queue.insert(key, user, p);
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
        resources: gpuq_core::JobResources::default(),
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
        self.remaining_ms = (self.remaining_ms - ran).max(1) + ms(opts.restart_penalty_s);
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
