//! One scheduling pass over the queue: dependencies, holds, quotas, then a
//! start on one node or on several, a reservation for the first job that
//! cannot start, and preemption for it.

use super::gang::{self, GangOption, Kinds, Request};
use super::pool::Pool;
use super::preempt;
use super::reserve::{self, NodeGroup, Reservation};
use super::*;

/// What trying to start a job came to.
enum Attempt {
    Started,
    /// No node (or not enough nodes) has room for it now.
    NoRoom,
    /// It has room, but only where it would delay the reserved job.
    Reserved,
}

/// The state of one pass: what is free, what is reserved, what was decided.
struct Pass<'a, 'p> {
    input: &'a ScheduleInput<'a>,
    pool: Pool<'a>,
    /// Computed the first time a job needs the kinds of node.
    kinds: Option<Kinds>,
    reservation: Option<Reservation>,
    /// The first job held back for lack of GPUs: the one preemption may make room for.
    blocked_head: Option<(&'p PendingJob, Request)>,
    /// Whether the policy has any quota (else the counts below stay empty).
    quotas: bool,
    /// GPUs held per user and per project, for quotas (including this pass's starts).
    user_gpus: HashMap<Arc<str>, u32>,
    project_gpus: HashMap<Arc<str>, u32>,
    /// Jobs running per group with a limit (including this pass's starts).
    group_running: HashMap<JobId, u32>,
    decisions: Vec<Decision>,
}

pub(super) fn run<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
    mut reasons: Option<&mut Vec<(JobId, WaitReason)>>,
    kinds: Option<&Kinds>,
) -> Vec<Decision> {
    let pending = fair_share_order(input.policy, pending);
    let explaining = reasons.is_some();
    let mut why = |job: JobId, reason: WaitReason| {
        if let Some(r) = reasons.as_deref_mut() {
            r.push((job, reason));
        }
    };
    let mut user_gpus: HashMap<Arc<str>, u32> = HashMap::new();
    let mut project_gpus: HashMap<Arc<str>, u32> = HashMap::new();
    // Without a quota nothing reads the GPUs held per user or project: no
    // need to count them over every running job on every pass.
    let quotas = !input.policy.user_max_gpus.is_empty()
        || input.policy.default_user_max_gpus.is_some()
        || !input.policy.project_max_gpus.is_empty();
    for r in input.running.iter().filter(|_| quotas) {
        let held = r.placement.gpu_count();
        *user_gpus.entry(r.user.clone()).or_default() += held;
        if let Some(p) = &r.project {
            *project_gpus.entry(p.clone()).or_default() += held;
        }
    }
    let mut group_running: HashMap<JobId, u32> = HashMap::new();
    for g in input.running.iter().filter_map(|r| r.group) {
        *group_running.entry(g.id).or_default() += 1;
    }
    let mut pass = Pass {
        input,
        pool: Pool::new(input.nodes, input.running),
        kinds: kinds.cloned(),
        reservation: None,
        blocked_head: None,
        quotas,
        user_gpus,
        project_gpus,
        group_running,
        decisions: Vec::new(),
    };
    for job in pending {
        match dependency_verdict(job, input.dependency) {
            DependencyVerdict::Ready => {}
            DependencyVerdict::Wait(dep) => {
                why(job.id, WaitReason::Dependency(dep));
                continue;
            }
            DependencyVerdict::Fail(reason) => {
                pass.decisions.push(Decision::Fail {
                    job: job.id,
                    reason,
                });
                continue;
            }
        }
        let request = match gang::request(job, input.nodes, pass.pool.largest, &mut pass.kinds) {
            Ok(r) => r,
            Err(reason) => {
                pass.decisions.push(Decision::Fail {
                    job: job.id,
                    reason,
                });
                continue;
            }
        };
        if let Some(what) = &job.waits_on {
            why(job.id, WaitReason::Outside(Arc::clone(what)));
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
        if let Some(reason) = pass.group_reason(job) {
            why(job.id, reason);
            continue;
        }
        if let Some(reason) = pass.quota_reason(job) {
            why(job.id, reason);
            continue;
        }
        let attempt = match &request {
            Request::Single => pass.try_single(job),
            Request::Gang(options) => pass.try_gang(job, options),
        };
        match attempt {
            Attempt::Started => {}
            Attempt::NoRoom => {
                let mut reserved = None;
                // A job that reserves nothing (a CPU-only job without cores
                // or memory of its own) waits only for a slot: no reservation.
                if pass.reservation.is_none() && (job.total_gpus() > 0 || !job.resources.is_none())
                {
                    let groups = pass.groups(job, &request);
                    pass.reservation = reserve::reserve(input.now, &pass.pool, &groups);
                    reserved = pass.reservation.as_ref().map(|r| r.start);
                    pass.blocked_head = Some((job, request.clone()));
                }
                if explaining {
                    why(job.id, pass.resources_reason(job, &request, reserved));
                }
                if input.policy.strict_order {
                    break;
                }
            }
            Attempt::Reserved if input.policy.strict_order => break,
            Attempt::Reserved => {
                let head = pass.blocked_head.as_ref().map_or(job.id, |(h, _)| h.id);
                let start = pass.reservation.as_ref().and_then(|r| r.start);
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
    if let Some((head, request)) = pass.blocked_head.take() {
        let groups = pass.groups(head, &request);
        for victim in preempt::victims(head, &groups, input.running, &pass.pool) {
            pass.decisions.push(Decision::Preempt {
                job: victim,
                for_job: head.id,
            });
        }
    }
    pass.decisions
}

impl<'a, 'p> Pass<'a, 'p> {
    fn group_reason(&self, job: &PendingJob) -> Option<WaitReason> {
        let group = job.group?;
        let running = self.group_running.get(&group.id).copied().unwrap_or(0);
        (running >= group.limit).then_some(WaitReason::GroupLimit {
            group: group.id,
            running,
            limit: group.limit,
        })
    }

    fn quota_reason(&self, job: &PendingJob) -> Option<WaitReason> {
        let gpus = job.total_gpus();
        if gpus == 0 || !self.quotas {
            return None;
        }
        let policy = self.input.policy;
        let used = self.user_gpus.get(&job.user).copied().unwrap_or(0);
        if let Some(limit) = policy.user_limit(&job.user).filter(|&l| used + gpus > l) {
            return Some(WaitReason::UserQuota {
                user: job.user.clone(),
                used,
                limit,
            });
        }
        let project = job.project.as_ref()?;
        let used = self.project_gpus.get(project).copied().unwrap_or(0);
        let limit = *policy
            .project_max_gpus
            .get(project)
            .filter(|&&l| used + gpus > l)?;
        Some(WaitReason::ProjectQuota {
            project: project.clone(),
            used,
            limit,
        })
    }

    fn ends_by(&self, job: &PendingJob) -> Option<Millis> {
        job.time_limit_ms
            .map(|t| self.input.now.saturating_add(t as i64))
    }

    /// A job on one node: best fit, within the reservation's rule.
    fn try_single(&mut self, job: &'p PendingJob) -> Attempt {
        let pool = &self.pool;
        // Fast path for deep queues: most waiting jobs fit nowhere; decide that without allocating.
        let fits_somewhere = if job.is_constrained() {
            (0..pool.nodes.len())
                .any(|n| pool.free_slots[n] > 0 && pool.suitable_free(n, job) >= job.gpus)
        } else {
            pool.fits_anywhere(job.gpus)
        };
        if !fits_somewhere {
            return Attempt::NoRoom;
        }
        let ends_by = self.ends_by(job);
        let res = &job.resources;
        // Whether some node has room (GPUs, cores, memory) before the
        // reservation's rule: `None` then means waiting for the reservation.
        let mut room = false;
        let mut admits = |n: usize| {
            if !res.is_none() && !pool.host_fits(n, res) {
                return false;
            }
            room = true;
            self.reservation
                .as_ref()
                .is_none_or(|r| r.allows(n, job.gpus, res, ends_by))
        };
        let chosen = if job.is_constrained() {
            let mut fits: Vec<(u32, usize)> = (0..pool.nodes.len())
                .filter(|&n| pool.free_slots[n] > 0)
                .map(|n| (pool.suitable_free(n, job), n))
                .filter(|&(usable, _)| usable >= job.gpus)
                .map(|(usable, n)| (usable - job.gpus, n))
                .collect();
            fits.sort_unstable();
            fits.into_iter().map(|(_, n)| n).find(|&n| admits(n))
        } else {
            pool.best_fit(job.gpus, admits)
        };
        let Some(node) = chosen else {
            return if room {
                Attempt::Reserved
            } else {
                Attempt::NoRoom
            };
        };
        let candidates = self.pool.free_suiting(node, job);
        let gpus = self.pool.nodes[node].pick(&candidates, job.gpus as usize);
        self.start(job, Placement::single(node, gpus), ends_by);
        Attempt::Started
    }

    /// A job on several nodes of one kind, all at once.
    fn try_gang(&mut self, job: &'p PendingJob, options: &[GangOption]) -> Attempt {
        let kinds = self.kinds.as_ref().expect("computed with the request");
        let ends_by = self.ends_by(job);
        let mut has_room = false;
        let mut chosen = None;
        for option in options {
            let ready = gang::ready_nodes(&self.pool, kinds, option, job);
            if ready.len() < option.nodes as usize {
                continue;
            }
            has_room = true;
            let admitted: Vec<usize> = ready
                .into_iter()
                .filter(|&n| {
                    self.reservation
                        .as_ref()
                        .is_none_or(|r| r.allows(n, option.per_node, &job.resources, ends_by))
                })
                .take(option.nodes as usize)
                .collect();
            if admitted.len() == option.nodes as usize {
                chosen = Some((*option, admitted));
                break;
            }
        }
        let Some((option, mut at)) = chosen else {
            return if has_room {
                Attempt::Reserved
            } else {
                Attempt::NoRoom
            };
        };
        // Rank order: by node index, so rank 0 is the lowest node of the placement.
        at.sort_unstable();
        let placement = at
            .into_iter()
            .map(|n| {
                let candidates = self.pool.free_suiting(n, job);
                NodeGpus {
                    node: n,
                    gpus: self.pool.nodes[n].pick(&candidates, option.per_node as usize),
                }
            })
            .collect();
        self.start(job, Placement(placement), ends_by);
        Attempt::Started
    }

    fn start(&mut self, job: &PendingJob, placement: Placement, ends_by: Option<Millis>) {
        for part in &placement.0 {
            self.pool
                .take(part.node, &part.gpus, job.resources, ends_by);
            if let Some(r) = &mut self.reservation {
                r.take(part.node, part.gpus.len() as u32, &job.resources, ends_by);
            }
        }
        if let Some(g) = job.group {
            *self.group_running.entry(g.id).or_default() += 1;
        }
        let held = placement.gpu_count();
        if self.quotas {
            *self.user_gpus.entry(job.user.clone()).or_default() += held;
            if let Some(p) = &job.project {
                *self.project_gpus.entry(p.clone()).or_default() += held;
            }
        }
        self.decisions.push(Decision::Start {
            job: job.id,
            placement,
        });
    }

    /// The nodes `job` could use, as reservations and preemption see them.
    fn groups(&self, job: &PendingJob, request: &Request) -> Vec<NodeGroup> {
        let nodes = self.input.nodes;
        match request {
            Request::Single => vec![NodeGroup {
                candidates: (0..nodes.len())
                    .filter(|&n| nodes[n].suitable(job) >= job.gpus)
                    .filter(|&n| job.resources.is_none() || nodes[n].can_hold(&job.resources))
                    .collect(),
                count: 1,
                per_node: job.gpus,
                res: job.resources,
                kind: None,
            }],
            Request::Gang(options) => {
                let kinds = self.kinds.as_ref().expect("computed with the request");
                options
                    .iter()
                    .map(|o| NodeGroup {
                        candidates: kinds.members[o.kind].clone(),
                        count: o.nodes,
                        per_node: o.per_node,
                        res: job.resources,
                        kind: Some(o.kind),
                    })
                    .collect()
            }
        }
    }

    /// Why a job with no room waits, for `explain`.
    fn resources_reason(
        &mut self,
        job: &PendingJob,
        request: &Request,
        reserved: Option<Option<Millis>>,
    ) -> WaitReason {
        let pool = &self.pool;
        if pool.free_slots.iter().all(|&s| s == 0) {
            return WaitReason::Slots;
        }
        if let (Request::Single, Some(reason)) = (request, host_reason(pool, job, reserved)) {
            return reason;
        }
        let kinds = self.kinds.get_or_insert_with(|| Kinds::of(pool.nodes));
        match request {
            Request::Single if kinds.members.len() <= 1 => WaitReason::Resources {
                gpus: job.gpus,
                most_free: (0..pool.nodes.len())
                    .filter(|&n| pool.free_slots[n] > 0)
                    .map(|n| pool.free[n])
                    .max()
                    .unwrap_or(0),
                reserved,
            },
            Request::Single => WaitReason::Nodes(gang::single_shortage(pool, kinds, job, reserved)),
            Request::Gang(options) => {
                let reserved_kind = reserved.and(self.reservation.as_ref()).and_then(|r| r.kind);
                WaitReason::Nodes(gang::gang_shortage(
                    pool,
                    kinds,
                    options,
                    job,
                    reserved,
                    reserved_kind,
                ))
            }
        }
    }
}

/// Why a job that fits by GPUs somewhere still has no room: the cores or the
/// memory of the nodes with its GPUs free (`None` when GPUs are what it lacks).
fn host_reason(
    pool: &Pool<'_>,
    job: &PendingJob,
    reserved: Option<Option<Millis>>,
) -> Option<WaitReason> {
    let res = &job.resources;
    if res.is_none() {
        return None;
    }
    let gpu_ok: Vec<usize> = (0..pool.nodes.len())
        .filter(|&n| pool.free_slots[n] > 0 && pool.suitable_free(n, job) >= job.gpus)
        .collect();
    if gpu_ok.is_empty() {
        return None;
    }
    let cores_ok = |n: usize| pool.nodes[n].cpus == 0 || res.cpus <= pool.free_host[n].cpus;
    if !gpu_ok.iter().any(|&n| cores_ok(n)) {
        return Some(WaitReason::Cores {
            cpus: res.cpus,
            most_free: gpu_ok
                .iter()
                .map(|&n| pool.free_host[n].cpus)
                .max()
                .unwrap_or(0),
            reserved,
        });
    }
    Some(WaitReason::Memory {
        mib: res.memory_mib,
        most_free_mib: gpu_ok
            .iter()
            .filter(|&&n| cores_ok(n))
            .map(|&n| pool.free_host[n].memory_mib)
            .max()
            .unwrap_or(0),
        reserved,
    })
}

/// Queue order with fair share: priority class, then the user's standing, then
/// submit order. Without standings, or with one user, the caller's order is kept
/// and nothing is sorted (deep single-user queues stay cheap).
fn fair_share_order<'p>(
    policy: &Policy,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> Vec<&'p PendingJob> {
    let jobs: Vec<&PendingJob> = pending.into_iter().collect();
    let several_users = jobs.windows(2).any(|w| w[0].user != w[1].user);
    if policy.standing.is_empty() || !several_users {
        return jobs;
    }
    // Each job's standing looked up once (not twice per comparison), and no
    // sort at all when the caller already gives the order (the simulator
    // does): the same order as one stable sort by the comparator.
    // Callers hand a user's jobs in runs: one look-up per run, not per job.
    let mut last: Option<(&Arc<str>, f64)> = None;
    let mut keyed: Vec<(f64, &PendingJob)> = Vec::with_capacity(jobs.len());
    for j in jobs {
        let standing = match last {
            Some((user, standing)) if Arc::ptr_eq(user, &j.user) => standing,
            _ => policy.standing_of(&j.user),
        };
        last = Some((&j.user, standing));
        keyed.push((standing, j));
    }
    let order = |a: &(f64, &PendingJob), b: &(f64, &PendingJob)| {
        b.1.priority
            .cmp(&a.1.priority)
            .then(a.0.total_cmp(&b.0))
            .then((a.1.submitted_at, a.1.id).cmp(&(b.1.submitted_at, b.1.id)))
    };
    if !keyed
        .windows(2)
        .all(|w| order(&w[0], &w[1]) != std::cmp::Ordering::Greater)
    {
        keyed.sort_by(order);
    }
    keyed.into_iter().map(|(_, j)| j).collect()
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
