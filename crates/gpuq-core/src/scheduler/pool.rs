//! What is free during one pass: GPUs, slots, cores and memory per node, and
//! who holds the rest until when (for reservations). Built once per pass in O(nodes +
//! running GPUs), in a few flat vectors: a pass over a cluster of a thousand
//! nodes allocates no per-node set.

use super::{Node, PendingJob, RunningJob};
use crate::{JobResources, Millis};

/// A job's GPUs, cores and memory on one node, and when its time limit frees them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Holder {
    pub node: usize,
    pub gpus: u32,
    pub res: JobResources,
    pub ends_by: Option<Millis>,
}

impl Holder {
    /// Holds something a reservation could wait for.
    pub fn holds_any(&self) -> bool {
        self.gpus > 0 || !self.res.is_none()
    }
}

pub(super) struct Pool<'a> {
    pub nodes: &'a [Node],
    /// Free GPUs as bits over positions in `Node::gpus`; node `n` owns the
    /// words `offset[n]..offset[n + 1]`.
    offset: Vec<usize>,
    bits: Vec<u64>,
    /// Free GPUs per node.
    pub free: Vec<u32>,
    pub free_slots: Vec<u32>,
    /// Cores and memory no job holds, per node (only meaningful where the
    /// node counts them: `Node::cpus` / `Node::memory_mib` above 0).
    pub free_host: Vec<JobResources>,
    /// Nodes with a free slot, by number of free GPUs: "does a job of g GPUs
    /// fit anywhere" is answered without a scan of the nodes.
    by_free: Vec<u32>,
    /// Every job holding GPUs, per node, including this pass's starts.
    pub holders: Vec<Holder>,
    /// GPUs of the largest node.
    pub largest: u32,
}

impl<'a> Pool<'a> {
    pub fn new(nodes: &'a [Node], running: &[RunningJob]) -> Pool<'a> {
        let mut offset = Vec::with_capacity(nodes.len() + 1);
        let mut words = 0;
        for n in nodes {
            offset.push(words);
            words += n.gpus.len().div_ceil(64);
        }
        offset.push(words);
        let mut bits = vec![0u64; words];
        for (i, n) in nodes.iter().enumerate() {
            for (k, word) in bits[offset[i]..offset[i + 1]].iter_mut().enumerate() {
                let left = n.gpus.len() - k * 64;
                *word = if left >= 64 {
                    u64::MAX
                } else {
                    (1 << left) - 1
                };
            }
        }
        let mut free_slots: Vec<u32> = nodes.iter().map(|n| n.slots).collect();
        let mut free_host: Vec<JobResources> = nodes
            .iter()
            .map(|n| JobResources {
                cpus: n.cpus,
                memory_mib: n.memory_mib,
            })
            .collect();
        let mut holders = Vec::with_capacity(running.len());
        for r in running {
            for part in &r.placement.0 {
                let Some(node) = nodes.get(part.node) else {
                    continue;
                };
                for &g in &part.gpus {
                    if let Some(p) = node.position(g) {
                        bits[offset[part.node] + p / 64] &= !(1 << (p % 64));
                    }
                }
                free_slots[part.node] = free_slots[part.node].saturating_sub(1);
                let host = &mut free_host[part.node];
                host.cpus = host.cpus.saturating_sub(r.resources.cpus);
                host.memory_mib = host.memory_mib.saturating_sub(r.resources.memory_mib);
                holders.push(Holder {
                    node: part.node,
                    gpus: part.gpus.len() as u32,
                    res: r.resources,
                    ends_by: r.ends_by,
                });
            }
        }
        let free: Vec<u32> = (0..nodes.len())
            .map(|i| {
                bits[offset[i]..offset[i + 1]]
                    .iter()
                    .map(|w| w.count_ones())
                    .sum()
            })
            .collect();
        let largest = nodes.iter().map(|n| n.gpus.len() as u32).max().unwrap_or(0);
        let mut by_free = vec![0; largest as usize + 1];
        for (n, &f) in free.iter().enumerate() {
            if free_slots[n] > 0 {
                by_free[f as usize] += 1;
            }
        }
        Pool {
            nodes,
            offset,
            bits,
            free,
            free_slots,
            free_host,
            by_free,
            holders,
            largest,
        }
    }

    /// Whether node `n` has the cores and memory `res` asks for free (a node
    /// that does not count cores or memory has them).
    pub fn host_fits(&self, n: usize, res: &JobResources) -> bool {
        let node = &self.nodes[n];
        let free = &self.free_host[n];
        (node.cpus == 0 || res.cpus <= free.cpus)
            && (node.memory_mib == 0 || res.memory_mib <= free.memory_mib)
    }

    /// Positions (in `Node::gpus`) of the free GPUs of node `n`.
    fn free_positions(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.bits[self.offset[n]..self.offset[n + 1]]
            .iter()
            .enumerate()
            .flat_map(|(k, &word)| {
                let mut w = word;
                std::iter::from_fn(move || {
                    if w == 0 {
                        return None;
                    }
                    let bit = w.trailing_zeros() as usize;
                    w &= w - 1;
                    Some(k * 64 + bit)
                })
            })
    }

    /// Free GPUs of node `n` that suit the job.
    pub fn suitable_free(&self, n: usize, job: &PendingJob) -> u32 {
        if !job.is_constrained() {
            return self.free[n];
        }
        let node = &self.nodes[n];
        self.free_positions(n)
            .filter(|&p| node.suits_at(job, p))
            .count() as u32
    }

    /// The free GPUs of node `n` that suit the job, as indices, lowest first.
    pub fn free_suiting(&self, n: usize, job: &PendingJob) -> Vec<u32> {
        let node = &self.nodes[n];
        let mut out: Vec<u32> = self
            .free_positions(n)
            .filter(|&p| node.suits_at(job, p))
            .map(|p| node.gpus[p])
            .collect();
        out.sort_unstable();
        out
    }

    /// Some node with a free slot has at least `gpus` free GPUs.
    pub fn fits_anywhere(&self, gpus: u32) -> bool {
        self.by_free
            .get(gpus as usize..)
            .is_some_and(|counts| counts.iter().any(|&c| c > 0))
    }

    /// The first node in best-fit order (fewest free GPUs left over, then the
    /// lowest index) that has a free slot, at least `gpus` free GPUs and that
    /// `admits` accepts. Free GPUs are counted whatever they are: for jobs
    /// without a model or memory constraint.
    pub fn best_fit(&self, gpus: u32, mut admits: impl FnMut(usize) -> bool) -> Option<usize> {
        for free in gpus..=self.largest {
            if self.by_free[free as usize] == 0 {
                continue;
            }
            let found = (0..self.nodes.len())
                .filter(|&n| self.free_slots[n] > 0 && self.free[n] == free)
                .find(|&n| admits(n));
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Marks `gpus` of node `n`, one of its slots, and the cores and memory
    /// of `res` as taken until `ends_by`.
    pub fn take(&mut self, n: usize, gpus: &[u32], res: JobResources, ends_by: Option<Millis>) {
        let host = &mut self.free_host[n];
        host.cpus = host.cpus.saturating_sub(res.cpus);
        host.memory_mib = host.memory_mib.saturating_sub(res.memory_mib);
        if self.free_slots[n] > 0 {
            self.by_free[self.free[n] as usize] -= 1;
        }
        for &g in gpus {
            if let Some(p) = self.nodes[n].position(g) {
                let word = &mut self.bits[self.offset[n] + p / 64];
                if *word & (1 << (p % 64)) != 0 {
                    *word &= !(1 << (p % 64));
                    self.free[n] -= 1;
                }
            }
        }
        self.free_slots[n] = self.free_slots[n].saturating_sub(1);
        if self.free_slots[n] > 0 {
            self.by_free[self.free[n] as usize] += 1;
        }
        self.holders.push(Holder {
            node: n,
            gpus: gpus.len() as u32,
            res,
            ends_by,
        });
    }
}
