//! EASY backfill's reservation: the earliest start the first blocked job can
//! be promised, on one node or on the several nodes of a multi-node job, and
//! the rule that a later job may not delay it. GPUs, cores and memory are
//! reserved alike (cores and memory only on nodes that count them).

use super::pool::{Holder, Pool};
use crate::{JobResources, Millis};

/// Nodes the blocked job could use: `count` of `candidates`, with `per_node`
/// GPUs and `res` free on each.
pub(super) struct NodeGroup {
    pub candidates: Vec<usize>,
    pub count: u32,
    pub per_node: u32,
    pub res: JobResources,
    /// The gang option's kind, for `explain` (none for a single-node job).
    pub kind: Option<usize>,
}

/// What a reserved node has at the reserved start beyond the reserved job's
/// share: GPUs, cores, memory (`u32::MAX`/`u64::MAX` where the node does not
/// count cores or memory).
#[derive(Debug, Clone, Copy)]
struct Spare {
    gpus: u32,
    res: JobResources,
}

/// A reserved node and what it has to spare.
type NodeSpare = (usize, Spare);

pub(super) struct Reservation {
    /// Reserved start; `None` when some running job has no time limit, so the start is unknown.
    pub start: Option<Millis>,
    /// Per node: `None` when not reserved, else what is free at the reserved
    /// start beyond what the reserved job needs there.
    spare: Vec<Option<Spare>>,
    /// The kind of the reserved gang option.
    pub kind: Option<usize>,
}

impl Reservation {
    /// Whether a job of `gpus` GPUs and `res` on `node`, ending by
    /// `ends_by`, leaves the reservation whole: it ends in time, or it takes
    /// only what the reserved job will not need. A CPU-only job that reserves
    /// no cores or memory never waits for a reservation.
    pub fn allows(
        &self,
        node: usize,
        gpus: u32,
        res: &JobResources,
        ends_by: Option<Millis>,
    ) -> bool {
        match self.spare[node] {
            None => true,
            Some(spare) => {
                self.ends_in_time(ends_by)
                    || (gpus <= spare.gpus
                        && res.cpus <= spare.res.cpus
                        && res.memory_mib <= spare.res.memory_mib)
            }
        }
    }

    /// Records a start that [`Reservation::allows`] accepted.
    pub fn take(&mut self, node: usize, gpus: u32, res: &JobResources, ends_by: Option<Millis>) {
        let in_time = self.ends_in_time(ends_by);
        if let Some(spare) = &mut self.spare[node] {
            if !in_time {
                spare.gpus = spare.gpus.saturating_sub(gpus);
                spare.res.cpus = spare.res.cpus.saturating_sub(res.cpus);
                spare.res.memory_mib = spare.res.memory_mib.saturating_sub(res.memory_mib);
            }
        }
    }

    fn ends_in_time(&self, ends_by: Option<Millis>) -> bool {
        matches!((ends_by, self.start), (Some(e), Some(s)) if e <= s)
    }
}

/// The earliest start over the groups (ties: the first group, then the lowest
/// nodes), from the time limits of the holders. `None` when no group has
/// enough nodes.
pub(super) fn reserve(now: Millis, pool: &Pool<'_>, groups: &[NodeGroup]) -> Option<Reservation> {
    // By node, then by end; unknown ends (no time limit) sort last. Bucketed
    // by node first (stable, linear), then sorted by end within each node:
    // the order of one stable sort by (node, end), without sorting every
    // running job again on every pass.
    let mut start_of = vec![0usize; pool.nodes.len() + 1];
    for h in pool.holders.iter().filter(|h| h.holds_any()) {
        start_of[h.node + 1] += 1;
    }
    for i in 1..start_of.len() {
        start_of[i] += start_of[i - 1];
    }
    let mut at = start_of.clone();
    let mut holders: Vec<Holder> = vec![
        Holder {
            node: 0,
            gpus: 0,
            res: JobResources::default(),
            ends_by: None
        };
        start_of[pool.nodes.len()]
    ];
    for h in pool.holders.iter().filter(|h| h.holds_any()) {
        holders[at[h.node]] = *h;
        at[h.node] += 1;
    }
    for w in start_of.windows(2) {
        holders[w[0]..w[1]]
            .sort_by_key(|h| (h.ends_by.is_none(), h.ends_by.unwrap_or(Millis::MAX)));
    }
    let on_node = |n: usize| &holders[start_of[n]..start_of[n + 1]];
    // (start, (node, spare) of the chosen nodes, kind) of the best group so far.
    let mut best: Option<(Option<Millis>, Vec<NodeSpare>, Option<usize>)> = None;
    for group in groups {
        // (start, node, spare) per candidate node that can ever hold its share.
        let mut ready: Vec<(Option<Millis>, usize, Spare)> = group
            .candidates
            .iter()
            .filter_map(|&n| {
                let node = &pool.nodes[n];
                // Cores and memory count only where the node counts them.
                let need = JobResources {
                    cpus: if node.cpus == 0 { 0 } else { group.res.cpus },
                    memory_mib: if node.memory_mib == 0 {
                        0
                    } else {
                        group.res.memory_mib
                    },
                };
                let mut gpus = pool.free[n];
                let mut host = pool.free_host[n];
                let enough = |g: u32, h: &JobResources| {
                    g >= group.per_node && h.cpus >= need.cpus && h.memory_mib >= need.memory_mib
                };
                let mut start = Some(now);
                for h in on_node(n) {
                    if enough(gpus, &host) {
                        break;
                    }
                    gpus += h.gpus;
                    host.cpus += h.res.cpus;
                    host.memory_mib += h.res.memory_mib;
                    start = h.ends_by;
                }
                if !enough(gpus, &host) {
                    return None;
                }
                let spare = Spare {
                    gpus: gpus - group.per_node,
                    res: JobResources {
                        cpus: if node.cpus == 0 {
                            u32::MAX
                        } else {
                            host.cpus - need.cpus
                        },
                        memory_mib: if node.memory_mib == 0 {
                            u64::MAX
                        } else {
                            host.memory_mib - need.memory_mib
                        },
                    },
                };
                Some((start, n, spare))
            })
            .collect();
        let count = group.count as usize;
        if ready.len() < count || count == 0 {
            continue;
        }
        ready.sort_by_key(|&(start, n, _)| (start.is_none(), start.unwrap_or(Millis::MAX), n));
        ready.truncate(count);
        // Sorted: the last chosen node is the one that frees up last.
        let start = ready[count - 1].0;
        let better = match &best {
            None => true,
            Some((b, _, _)) => match (start, b) {
                (Some(s), Some(bs)) => s < *bs,
                (Some(_), None) => true,
                _ => false,
            },
        };
        if better {
            let nodes = ready.iter().map(|&(_, n, spare)| (n, spare)).collect();
            best = Some((start, nodes, group.kind));
        }
    }
    let (start, nodes, kind) = best?;
    let mut spare = vec![None; pool.nodes.len()];
    for (n, s) in nodes {
        spare[n] = Some(s);
    }
    Some(Reservation { start, spare, kind })
}
