//! Preemption for the first blocked job: the fewest preemptible, lower-class
//! running jobs whose GPUs (and cores and memory, where a node counts them)
//! let it start, on one node or on the several nodes it needs.

use super::pool::Pool;
use super::reserve::NodeGroup;
use super::{PendingJob, RunningJob};
use crate::JobId;

/// The victims for `head`, which could use any of `groups`. Empty when it
/// needs no preemption (it fits once the jobs already stopping are gone) or
/// when no set of victims suffices.
///
/// Per node, the fewest victims are the largest first (then the lowest class,
/// then the newest: the least work lost); a group takes its cheapest nodes. A
/// victim on several nodes frees all of them and is stopped once.
pub(super) fn victims(
    head: &PendingJob,
    groups: &[NodeGroup],
    running: &[RunningJob],
    pool: &Pool<'_>,
) -> Vec<JobId> {
    let eligible = |r: &RunningJob| r.preemptible && !r.stopping && r.priority < head.priority;
    // Deep queues and large clusters: most passes have no possible victim at all.
    if !running.iter().any(eligible) {
        return Vec::new();
    }
    let nodes = pool.nodes;
    let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, r) in running.iter().enumerate() {
        for n in r.placement.nodes() {
            if let Some(list) = on_node.get_mut(n) {
                list.push(i);
            }
        }
    }
    // Only GPUs that suit the head job count: freeing an L4 does not help a job that needs an A100.
    let suiting = |n: usize, r: &RunningJob| {
        r.placement
            .on(n)
            .iter()
            .filter(|&&g| nodes[n].suits(head, g))
            .count() as u32
    };
    let mut best: Option<(usize, u32, Vec<usize>)> = None;
    for group in groups {
        // (victims, their GPUs, node, victims) of each node that can be freed.
        let mut costs: Vec<(usize, u32, usize, Vec<usize>)> = Vec::new();
        let mut ready = 0;
        for &n in &group.candidates {
            // Cores and memory count only where the node counts them.
            let need_cpus = if nodes[n].cpus == 0 {
                0
            } else {
                group.res.cpus
            };
            let need_mib = if nodes[n].memory_mib == 0 {
                0
            } else {
                group.res.memory_mib
            };
            let mut available = pool.suitable_free(n, head);
            let mut host = pool.free_host[n];
            let add = |r: &RunningJob, available: &mut u32, host: &mut crate::JobResources| {
                *available += suiting(n, r);
                host.cpus = host.cpus.saturating_add(r.resources.cpus);
                host.memory_mib = host.memory_mib.saturating_add(r.resources.memory_mib);
            };
            for &i in on_node[n].iter().filter(|&&i| running[i].stopping) {
                add(&running[i], &mut available, &mut host);
            }
            let enough = |available: u32, host: &crate::JobResources| {
                available >= group.per_node && host.cpus >= need_cpus && host.memory_mib >= need_mib
            };
            if enough(available, &host) {
                ready += 1;
                costs.push((0, 0, n, Vec::new()));
                continue;
            }
            // A victim helps if it frees what the head still lacks there.
            let helps = |r: &RunningJob| {
                suiting(n, r) > 0
                    || (need_cpus > 0 && r.resources.cpus > 0)
                    || (need_mib > 0 && r.resources.memory_mib > 0)
            };
            let mut candidates: Vec<usize> = on_node[n]
                .iter()
                .copied()
                .filter(|&i| eligible(&running[i]) && helps(&running[i]))
                .collect();
            candidates.sort_by_key(|&i| {
                let r = &running[i];
                (
                    std::cmp::Reverse(suiting(n, r)),
                    std::cmp::Reverse(r.resources.cpus),
                    std::cmp::Reverse(r.resources.memory_mib),
                    r.priority,
                    std::cmp::Reverse(r.id),
                )
            });
            let mut chosen = Vec::new();
            for i in candidates {
                if enough(available, &host) {
                    break;
                }
                add(&running[i], &mut available, &mut host);
                chosen.push(i);
            }
            if enough(available, &host) {
                let gpus = chosen
                    .iter()
                    .map(|&i| running[i].placement.gpu_count())
                    .sum();
                costs.push((chosen.len(), gpus, n, chosen));
            }
        }
        if ready >= group.count {
            // It fits once the jobs already stopping are gone: stop nothing more.
            return Vec::new();
        }
        if costs.len() < group.count as usize {
            continue;
        }
        costs.sort_by_key(|&(count, gpus, n, _)| (count, gpus, n));
        let mut picked: Vec<usize> = Vec::new();
        for (_, _, _, chosen) in costs.into_iter().take(group.count as usize) {
            for i in chosen {
                if !picked.contains(&i) {
                    picked.push(i);
                }
            }
        }
        let gpus: u32 = picked
            .iter()
            .map(|&i| running[i].placement.gpu_count())
            .sum();
        if best
            .as_ref()
            .is_none_or(|(count, g, _)| (picked.len(), gpus) < (*count, *g))
        {
            best = Some((picked.len(), gpus, picked));
        }
    }
    best.map(|(_, _, picked)| picked.into_iter().map(|i| running[i].id).collect())
        .unwrap_or_default()
}
