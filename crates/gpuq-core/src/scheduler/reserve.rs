//! EASY backfill's reservation: the earliest start the first blocked job can
//! be promised, on one node or on the several nodes of a multi-node job, and
//! the rule that a later job may not delay it.

use super::pool::{Holder, Pool};
use crate::Millis;

/// Nodes the blocked job could use: `count` of `candidates`, with `per_node`
/// GPUs free on each.
pub(super) struct NodeGroup {
    pub candidates: Vec<usize>,
    pub count: u32,
    pub per_node: u32,
    /// The gang option's kind, for `explain` (none for a single-node job).
    pub kind: Option<usize>,
}

/// A reserved node and the GPUs it has beyond the reserved job's share.
type NodeSpare = (usize, u32);

pub(super) struct Reservation {
    /// Reserved start; `None` when some running job has no time limit, so the start is unknown.
    pub start: Option<Millis>,
    /// Per node: `None` when not reserved, else the GPUs free at the reserved
    /// start beyond what the reserved job needs there.
    spare: Vec<Option<u32>>,
    /// The kind of the reserved gang option.
    pub kind: Option<usize>,
}

impl Reservation {
    /// Whether a job of `gpus` GPUs on `node`, ending by `ends_by`, leaves the reservation whole.
    pub fn allows(&self, node: usize, gpus: u32, ends_by: Option<Millis>) -> bool {
        match self.spare[node] {
            None => true,
            Some(spare) => self.ends_in_time(ends_by) || gpus <= spare,
        }
    }

    /// Records a start that [`Reservation::allows`] accepted.
    pub fn take(&mut self, node: usize, gpus: u32, ends_by: Option<Millis>) {
        let in_time = self.ends_in_time(ends_by);
        if let Some(spare) = &mut self.spare[node] {
            if !in_time {
                *spare -= gpus;
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
    for h in pool.holders.iter().filter(|h| h.gpus > 0) {
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
            ends_by: None
        };
        start_of[pool.nodes.len()]
    ];
    for h in pool.holders.iter().filter(|h| h.gpus > 0) {
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
        // (start, node, spare) per candidate node.
        let mut ready: Vec<(Option<Millis>, usize, u32)> = group
            .candidates
            .iter()
            .map(|&n| {
                let mut available = pool.free[n];
                let mut start = Some(now);
                for h in on_node(n) {
                    if available >= group.per_node {
                        break;
                    }
                    available += h.gpus;
                    start = h.ends_by;
                }
                (start, n, available.saturating_sub(group.per_node))
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
