//! The scheduler: a pure function from a snapshot of the queue, the running
//! jobs, the node inventories and `now` to a list of decisions.
//!
//! Policy (in this order):
//! - queue order is priority class (high first), then submit time, then id;
//! - a job waits until every job in its `after` list succeeded, and fails when
//!   one of them ended any other way;
//! - all of a job's GPUs are allocated at once (gang). A job that fits on one
//!   node gets the node it fits most tightly (best fit), lowest GPU indices
//!   first, the best-connected GPUs for several. A job larger than any node
//!   gets whole nodes of one kind ([`NodeKind`]: GPU count, model,
//!   interconnect), `ceil(gpus / per node)` of them: the kind that wastes the
//!   fewest GPUs to that rounding, then the fewest nodes. A job with
//!   `nodes: N` gets `gpus` GPUs on each of N nodes of one kind. Ranks follow
//!   the node order of the placement (the first is rank 0);
//! - EASY backfill: the first job that cannot start gets a reservation at the
//!   earliest time enough GPUs free up (from the running jobs' time limits), on
//!   one node or on the several nodes of a multi-node job; a later job may
//!   start ahead only if it cannot delay that reservation: it ends (by its time
//!   limit) before the reserved start, or it uses only GPUs the reserved job
//!   will not need, or it runs on nodes outside the reservation;
//! - held jobs and jobs in a retry back-off (`eligible_at` in the future) wait;
//! - a job of a group with a limit (the tasks of a job array with `%N`) waits
//!   while `limit` jobs of its group run (those started in the same pass count);
//! - preemption: when the first job that cannot start has a higher priority
//!   class than some running `preemptible` jobs, the fewest of them whose GPUs
//!   make it fit (on one node, or on the nodes a multi-node job needs) are
//!   stopped (never a job that is not preemptible, and nothing more while
//!   earlier victims are still stopping).

mod gang;
pub mod las;
mod node;
mod pass;
mod pool;
mod preempt;
mod reserve;

pub use gang::Kinds as NodeKinds;
pub use node::{GpuAttrs, Node, NodeKind};

use crate::{JobId, JobResources, Millis, Priority};
use std::collections::HashMap;
use std::sync::Arc;

/// The GPUs a job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpus {
    /// Index into the node list.
    pub node: usize,
    pub gpus: Vec<u32>,
}

/// Where a job runs: one entry per node, in rank order (the first node is
/// rank 0, MASTER_ADDR; the position is NODE_RANK, as torchrun numbers them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement(pub Vec<NodeGpus>);

impl Placement {
    /// All on one node.
    pub fn single(node: usize, gpus: Vec<u32>) -> Placement {
        Placement(vec![NodeGpus { node, gpus }])
    }

    /// The node and its GPUs, when the placement is on one node (always on a
    /// daemon with one node).
    pub fn as_single(&self) -> Option<(usize, &[u32])> {
        match self.0.as_slice() {
            [only] => Some((only.node, &only.gpus)),
            _ => None,
        }
    }

    /// GPUs on all nodes together (torchrun's WORLD_SIZE).
    pub fn gpu_count(&self) -> u32 {
        self.0.iter().map(|p| p.gpus.len() as u32).sum()
    }

    /// Nodes, in rank order (torchrun's NNODES is their number).
    pub fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|p| p.node)
    }

    /// The GPUs held on `node` (empty when none).
    pub fn on(&self, node: usize) -> &[u32] {
        self.0
            .iter()
            .find(|p| p.node == node)
            .map_or(&[], |p| &p.gpus)
    }
}

/// A job that holds resources now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub id: JobId,
    pub user: Arc<str>,
    pub project: Option<Arc<str>>,
    pub placement: Placement,
    /// When its time limit stops it, if it has one.
    pub ends_by: Option<Millis>,
    pub priority: Priority,
    pub preemptible: bool,
    /// Being stopped (cancel, time limit, preemption): its GPUs free up soon.
    pub stopping: bool,
    /// The group it counts against (a job array's tasks with a limit).
    pub group: Option<JobGroup>,
    /// Cores and memory it holds on each of its nodes.
    pub resources: JobResources,
}

/// Jobs of which at most `limit` run at once: the tasks of a job array with
/// `%N` (`id` is the array's). A stopping job still counts: it still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobGroup {
    pub id: JobId,
    pub limit: u32,
}

/// A job waiting in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub id: JobId,
    pub user: Arc<str>,
    pub project: Option<Arc<str>>,
    pub priority: Priority,
    pub submitted_at: Millis,
    /// GPUs in all (`nodes` unset), or on each node (`nodes` set).
    pub gpus: u32,
    /// The spec's `nodes`: `Some(n)` asks for `gpus` GPUs on each of `n` nodes
    /// of one kind. `None`: one node when one is large enough, else whole
    /// nodes of one kind.
    pub nodes: Option<u32>,
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
    /// Waits while `limit` jobs of its group run (a job array's `%N`).
    pub group: Option<JobGroup>,
    /// Waits on something outside the scheduler (its environment is being
    /// built): what, in words. It starts once this is cleared.
    pub waits_on: Option<Arc<str>>,
    /// Cores and memory it needs on each of its nodes (0: none counted).
    pub resources: JobResources,
}

impl PendingJob {
    /// The queue order: sort ascending by this key.
    pub fn queue_key(&self) -> QueueKey {
        QueueKey(std::cmp::Reverse(self.priority), self.submitted_at, self.id)
    }

    /// GPUs asked for in all (a whole-node placement may round this up).
    pub fn total_gpus(&self) -> u32 {
        self.gpus.saturating_mul(self.nodes.unwrap_or(1).max(1))
    }

    /// Asks for a GPU model or memory.
    pub fn is_constrained(&self) -> bool {
        self.gpu_type.is_some() || self.gpu_mem_mib.is_some()
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
        placement: Placement,
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

/// Why a queued job did not start in a pass: the rule that holds it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Waits for this job (queued or running) to succeed.
    Dependency(JobId),
    Held,
    Drained,
    /// Waits on something outside the scheduler ([`PendingJob::waits_on`]).
    Outside(Arc<str>),
    /// A retry waiting out its back-off.
    BackOff {
        until: Millis,
    },
    /// Not enough free GPUs on any node, on a cluster whose nodes are all of
    /// one kind (a daemon's own node). `reserved` is set when this job is the
    /// one the GPUs are reserved for (`Some(start)` when the start is known).
    Resources {
        gpus: u32,
        most_free: u32,
        reserved: Option<Option<Millis>>,
    },
    /// Not enough free GPUs on nodes of the kind it needs: a multi-node job, or
    /// any job on a cluster of several kinds of node.
    Nodes(NodeShortage),
    /// Enough free GPUs, but not `cpus` free cores with them on one node (at
    /// most `most_free`). `reserved` as in [`WaitReason::Resources`].
    Cores {
        cpus: u32,
        most_free: u32,
        reserved: Option<Option<Millis>>,
    },
    /// Enough free GPUs and cores, but not `mib` of free memory with them on
    /// one node (at most `most_free_mib`).
    Memory {
        mib: u64,
        most_free_mib: u64,
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
    /// `limit` jobs of its group already run (a job array's `%N`; `group` is the array's id).
    GroupLimit {
        group: JobId,
        running: u32,
        limit: u32,
    },
    /// It fits, but would delay the job the GPUs are reserved for (backfill rule).
    Reservation {
        for_job: JobId,
        start: Option<Millis>,
    },
}

/// Which nodes a waiting job needs and how many of them are free: the
/// [`WaitReason::Nodes`] of a job. Its `Display` is the sentence `explain` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeShortage {
    /// Nodes it needs at once (1: a job that fits on one node).
    pub nodes: u32,
    /// GPUs it needs on each of them.
    pub gpus_per_node: u32,
    /// It takes all of each node's GPUs (a job larger than one node).
    pub whole: bool,
    /// The kind of node it waits for; `None` when several kinds would do.
    pub kind: Option<NodeKind>,
    /// Nodes of that kind that could take their share now.
    pub ready: u32,
    /// The most GPUs free (that suit it) on one node of that kind.
    pub most_free: u32,
    /// As in [`WaitReason::Resources`]: set when the GPUs are reserved for it.
    pub reserved: Option<Option<Millis>>,
}

impl std::fmt::Display for NodeShortage {
    /// "needs 2 whole 8×V100 nodes; 1 is free", "needs 3 4×T4 nodes with 2
    /// free GPUs each; none has them", "no 4×T4 node has 4 free GPUs (at most 2)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self
            .kind
            .as_ref()
            .map(|k| format!("{k} "))
            .unwrap_or_default();
        let gpus = crate::plural(self.gpus_per_node.into(), "free GPU");
        if self.nodes <= 1 {
            return write!(
                f,
                "no {kind}node has {gpus} (at most {} on one)",
                self.most_free
            );
        }
        let ready = match self.ready {
            0 => "none".to_string(),
            n => n.to_string(),
        };
        if self.whole {
            let verb = if self.ready <= 1 { "is" } else { "are" };
            write!(
                f,
                "needs {} whole {kind}nodes; {ready} {verb} free",
                self.nodes
            )
        } else {
            let verb = if self.ready <= 1 { "has" } else { "have" };
            write!(
                f,
                "needs {} {kind}nodes with {gpus} each; {ready} {verb} them",
                self.nodes
            )
        }
    }
}

/// Decides which queued jobs start now and which fail. `pending` must be in
/// queue order (see [`PendingJob::queue_key`]).
pub fn schedule<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> Vec<Decision> {
    pass::run(input, pending, None, None)
}

/// [`schedule`] with the kinds of node computed beforehand
/// (`NodeKinds::of(input.nodes)`, for the same nodes): the same decisions,
/// without grouping the nodes again on every pass.
pub fn schedule_with_kinds<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
    kinds: &NodeKinds,
) -> Vec<Decision> {
    debug_assert_eq!(kinds, &NodeKinds::of(input.nodes), "kinds of other nodes");
    pass::run(input, pending, None, Some(kinds))
}

/// The same pass as [`schedule`], also saying for each job that does not start
/// why it waits. Used by `gpuq explain` and `gpuq ls`; not on the hot path.
pub fn explain<'p>(
    input: &ScheduleInput<'_>,
    pending: impl IntoIterator<Item = &'p PendingJob>,
) -> (Vec<Decision>, Vec<(JobId, WaitReason)>) {
    let mut reasons = Vec::new();
    let decisions = pass::run(input, pending, Some(&mut reasons), None);
    (decisions, reasons)
}

/// Whether `job` can ever be placed on `nodes` (all free): the test the pass
/// applies before failing a job as too large (by GPUs, cores or memory), for
/// callers that screen jobs before queueing them (the simulator, the daemon's
/// submit).
pub fn can_ever_place(job: &PendingJob, nodes: &[Node]) -> bool {
    let largest = nodes.iter().map(|n| n.gpus.len() as u32).max().unwrap_or(0);
    gang::request(job, nodes, largest, &mut None).is_ok()
}

#[cfg(test)]
mod tests;
