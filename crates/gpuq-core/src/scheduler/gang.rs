//! Multi-node jobs: the kinds of node in a cluster, how a job must be placed
//! (on one node, or on several of one kind), and which nodes can take it now.

use super::pool::Pool;
use super::{Node, NodeKind, NodeShortage, PendingJob};

/// The nodes of a cluster grouped by kind ([`Node::same_kind`]), kinds in the
/// order of their first node. Computing it compares every node's GPUs (model
/// strings), so a caller that runs many passes over the same nodes (the
/// simulator) computes it once and hands it to
/// [`schedule_with_kinds`](super::schedule_with_kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kinds {
    pub(super) members: Vec<Vec<usize>>,
}

impl Kinds {
    pub fn of(nodes: &[Node]) -> Kinds {
        let mut members: Vec<Vec<usize>> = Vec::new();
        // Neighbours are usually alike: try the previous node's kind first.
        let mut last: Option<usize> = None;
        for (i, node) in nodes.iter().enumerate() {
            let same = |k: &usize| nodes[members[*k][0]].same_kind(node);
            let kind = last.filter(same).or_else(|| (0..members.len()).find(same));
            let k = match kind {
                Some(k) => k,
                None => {
                    members.push(Vec::new());
                    members.len() - 1
                }
            };
            members[k].push(i);
            last = Some(k);
        }
        Kinds { members }
    }

    pub(super) fn label(&self, nodes: &[Node], kind: usize) -> NodeKind {
        nodes[self.members[kind][0]].kind()
    }
}

/// How a job is to be placed.
#[derive(Debug, Clone)]
pub(super) enum Request {
    /// On one node, as every job that fits on one.
    Single,
    /// On several nodes of one kind: the ways it could run, best first.
    Gang(Vec<GangOption>),
}

/// One way to run a multi-node job: `nodes` nodes of kind `kind`, `per_node`
/// GPUs on each; `whole`: all of each node's GPUs (that suit the job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GangOption {
    pub kind: usize,
    pub nodes: u32,
    pub per_node: u32,
    pub whole: bool,
}

/// How `job` must be placed on `nodes`, or why it never can be (the reason
/// of its `Fail`). `kinds` is computed here the first time a job needs it.
pub(super) fn request(
    job: &PendingJob,
    nodes: &[Node],
    largest: u32,
    kinds: &mut Option<Kinds>,
) -> Result<Request, String> {
    let largest = if job.is_constrained() {
        nodes.iter().map(|n| n.suitable(job)).max().unwrap_or(0)
    } else {
        largest
    };
    // Only on the way to a `Fail`: the common case allocates nothing.
    let asked = || crate::plural(job.gpus.into(), "GPU");
    // Nodes whose cores and memory could ever hold the job (all of them for
    // a job that reserves none, or where no node counts them).
    let holds = |n: &Node| job.resources.is_none() || n.can_hold(&job.resources);
    match job.nodes {
        None | Some(0) | Some(1) => {
            if job.gpus <= largest {
                if job.resources.is_none()
                    || nodes
                        .iter()
                        .any(|n| n.suitable(job) >= job.gpus && holds(n))
                {
                    return Ok(Request::Single);
                }
                return Err(host_too_large(job, nodes));
            }
            let too_large = || format!("job asks for {}; the largest node has {largest}", asked());
            if job.nodes.is_some() {
                return Err(too_large());
            }
            let kinds = kinds.get_or_insert_with(|| Kinds::of(nodes));
            let mut options = Vec::new();
            // The most GPUs on the nodes of one kind: (GPUs, nodes, kind).
            let mut most: Option<(u32, usize, usize)> = None;
            for (k, members) in kinds.members.iter().enumerate() {
                let per_node = nodes[members[0]].suitable(job);
                let holding = members.iter().filter(|&&n| holds(&nodes[n])).count();
                if per_node == 0 || holding < 2 {
                    continue;
                }
                let capacity = per_node.saturating_mul(holding as u32);
                if most.is_none_or(|(c, _, _)| capacity > c) {
                    most = Some((capacity, holding, k));
                }
                let need = job.gpus.div_ceil(per_node);
                if need as usize <= holding {
                    options.push(GangOption {
                        kind: k,
                        nodes: need,
                        per_node,
                        whole: true,
                    });
                }
            }
            if options.is_empty() {
                return Err(match most {
                    None => too_large(),
                    Some((capacity, count, k)) => format!(
                        "{} and the most on nodes of one kind is {capacity} ({count} {} nodes)",
                        too_large(),
                        kinds.label(nodes, k)
                    ),
                });
            }
            // The least rounding waste, then the fewest nodes (less traffic between them).
            options.sort_by_key(|o| (o.nodes * o.per_node - job.gpus, o.nodes, o.kind));
            Ok(Request::Gang(options))
        }
        Some(count) => {
            let kinds = kinds.get_or_insert_with(|| Kinds::of(nodes));
            let mut options = Vec::new();
            let mut most = 0;
            for (k, members) in kinds.members.iter().enumerate() {
                if nodes[members[0]].suitable(job) < job.gpus {
                    continue;
                }
                let holding = members.iter().filter(|&&n| holds(&nodes[n])).count();
                most = most.max(holding);
                if holding >= count as usize {
                    options.push(GangOption {
                        kind: k,
                        nodes: count,
                        per_node: job.gpus,
                        whole: false,
                    });
                }
            }
            if options.is_empty() {
                let have = match most {
                    0 => "no node has that many".to_string(),
                    1 => "only single nodes of a kind have that many".to_string(),
                    m => format!("at most {m} nodes of one kind have that many"),
                };
                return Err(format!(
                    "job asks for {count} nodes with {} each; {have}{}",
                    asked(),
                    if job.is_constrained() {
                        " that suit it"
                    } else {
                        ""
                    }
                ));
            }
            Ok(Request::Gang(options))
        }
    }
}

/// Why no node could ever hold a job that fits by GPUs: its cores or its
/// memory ("job asks for 8 cores; the largest node has 2").
fn host_too_large(job: &PendingJob, nodes: &[Node]) -> String {
    let gpu_ok = || nodes.iter().filter(|n| n.suitable(job) >= job.gpus);
    let res = &job.resources;
    let cores_ok = gpu_ok().any(|n| n.cpus == 0 || res.cpus <= n.cpus);
    if !cores_ok {
        let most = gpu_ok().map(|n| n.cpus).max().unwrap_or(0);
        return format!(
            "job asks for {}; the largest node has {most} for jobs",
            crate::plural(res.cpus.into(), "core")
        );
    }
    let most = gpu_ok()
        .filter(|n| n.cpus == 0 || res.cpus <= n.cpus)
        .map(|n| n.memory_mib)
        .max()
        .unwrap_or(0);
    format!(
        "job asks for {} of memory; the largest node has {} for jobs",
        crate::resources::mib_text(res.memory_mib),
        crate::resources::mib_text(most)
    )
}

/// The nodes of `option`'s kind that can take their share now (a free slot,
/// enough free GPUs, and its cores and memory), in the order a gang takes
/// them: tightest fit first, then the lowest index (whole nodes: by index).
pub(super) fn ready_nodes(
    pool: &Pool<'_>,
    kinds: &Kinds,
    option: &GangOption,
    job: &PendingJob,
) -> Vec<usize> {
    let mut ready: Vec<(u32, usize)> = kinds.members[option.kind]
        .iter()
        .filter(|&&n| pool.free_slots[n] > 0 && pool.host_fits(n, &job.resources))
        .filter_map(|&n| {
            let free = pool.suitable_free(n, job);
            let enough = if option.whole {
                free == option.per_node
            } else {
                free >= option.per_node
            };
            enough.then(|| (free - option.per_node, n))
        })
        .collect();
    ready.sort_unstable();
    ready.into_iter().map(|(_, n)| n).collect()
}

/// Why a multi-node job cannot start: the option closest to starting (the
/// reserved one when the job holds the reservation).
pub(super) fn gang_shortage(
    pool: &Pool<'_>,
    kinds: &Kinds,
    options: &[GangOption],
    job: &PendingJob,
    reserved: Option<Option<super::Millis>>,
    reserved_kind: Option<usize>,
) -> NodeShortage {
    let ready = |o: &GangOption| ready_nodes(pool, kinds, o, job).len() as u32;
    let chosen = options
        .iter()
        .find(|o| Some(o.kind) == reserved_kind)
        .or_else(|| {
            options
                .iter()
                .min_by_key(|o| o.nodes.saturating_sub(ready(o)))
        })
        .expect("a gang has options");
    NodeShortage {
        nodes: chosen.nodes,
        gpus_per_node: chosen.per_node,
        whole: chosen.whole,
        kind: Some(kinds.label(pool.nodes, chosen.kind)),
        ready: ready(chosen),
        most_free: most_free(pool, &kinds.members[chosen.kind], job),
        reserved,
    }
}

/// Why a job that fits on one node cannot start, on a cluster of several
/// kinds: the kind it waits for, when only one kind has nodes large enough.
pub(super) fn single_shortage(
    pool: &Pool<'_>,
    kinds: &Kinds,
    job: &PendingJob,
    reserved: Option<Option<super::Millis>>,
) -> NodeShortage {
    let large_enough: Vec<usize> = (0..kinds.members.len())
        .filter(|&k| pool.nodes[kinds.members[k][0]].suitable(job) >= job.gpus)
        .collect();
    let members: Vec<usize> = large_enough
        .iter()
        .flat_map(|&k| kinds.members[k].iter().copied())
        .collect();
    NodeShortage {
        nodes: 1,
        gpus_per_node: job.gpus,
        whole: false,
        kind: match large_enough.as_slice() {
            [k] => Some(kinds.label(pool.nodes, *k)),
            _ => None,
        },
        ready: 0,
        most_free: most_free(pool, &members, job),
        reserved,
    }
}

fn most_free(pool: &Pool<'_>, members: &[usize], job: &PendingJob) -> u32 {
    members
        .iter()
        .filter(|&&n| pool.free_slots[n] > 0)
        .map(|&n| pool.suitable_free(n, job))
        .max()
        .unwrap_or(0)
}
