//! A node's schedulable resources, its kind, and the choice of GPUs on it.

use super::PendingJob;
use crate::JobResources;

/// One machine's schedulable resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// GPU indices (nvidia-smi order).
    pub gpus: Vec<u32>,
    /// Jobs that may run at once on this node (GPU jobs and CPU-only jobs alike).
    pub slots: u32,
    /// What each GPU is, in the order of `gpus` (empty when unknown).
    pub attrs: Vec<GpuAttrs>,
    /// Interconnect quality between GPUs, in the order of `gpus`; higher is
    /// better (e.g. 3 NVLink, 2 same PCIe switch, 1 same CPU, 0 across CPUs).
    /// Empty: all pairs equal.
    pub links: Vec<Vec<u8>>,
    /// The network between this node and the others (e.g. "InfiniBand");
    /// empty when unknown. Part of the node's [`NodeKind`]: the nodes of one
    /// multi-node job share it, so no rank waits on a slower link.
    pub interconnect: String,
    /// CPU cores jobs may reserve here; 0: not counted (the simulator's
    /// traces, Slurm's nodes, whose own limits apply).
    pub cpus: u32,
    /// Memory (MiB) jobs may reserve here; 0: not counted.
    pub memory_mib: u64,
}

/// A GPU's model and memory, for jobs that ask for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuAttrs {
    pub model: String,
    pub memory_mib: u64,
}

/// What makes nodes interchangeable for a multi-node job: the same GPU count
/// (torchrun starts the same `nproc_per_node` on every node), the same GPUs
/// and the same interconnect.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeKind {
    pub gpus: u32,
    /// The GPUs' model; several models are joined by "+"; empty when unknown.
    pub model: String,
    pub interconnect: String,
}

impl std::fmt::Display for NodeKind {
    /// `8×V100`, `4-GPU` (model unknown), `8×H100 (InfiniBand)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.model.is_empty() {
            write!(f, "{}-GPU", self.gpus)?;
        } else {
            write!(f, "{}×{}", self.gpus, self.model)?;
        }
        if !self.interconnect.is_empty() {
            write!(f, " ({})", self.interconnect)?;
        }
        Ok(())
    }
}

impl Node {
    /// Whether the node could ever hold `res` (all of its cores and memory
    /// free); a node that does not count cores or memory holds any amount.
    pub fn can_hold(&self, res: &JobResources) -> bool {
        (self.cpus == 0 || res.cpus <= self.cpus)
            && (self.memory_mib == 0 || res.memory_mib <= self.memory_mib)
    }

    /// Position of GPU index `gpu` in `gpus` (indices are usually their own positions).
    pub(super) fn position(&self, gpu: u32) -> Option<usize> {
        if self.gpus.get(gpu as usize) == Some(&gpu) {
            return Some(gpu as usize);
        }
        self.gpus.iter().position(|&g| g == gpu)
    }

    /// Whether `gpu` satisfies the job's model and memory constraints.
    pub(super) fn suits(&self, job: &PendingJob, gpu: u32) -> bool {
        if !job.is_constrained() {
            return true;
        }
        self.position(gpu).is_some_and(|p| self.suits_at(job, p))
    }

    /// Whether the GPU at position `p` of `gpus` satisfies the job's constraints.
    pub(super) fn suits_at(&self, job: &PendingJob, p: usize) -> bool {
        if !job.is_constrained() {
            return true;
        }
        let Some(attrs) = self.attrs.get(p) else {
            return false;
        };
        let model_ok = job.gpu_type.as_ref().is_none_or(|t| {
            attrs
                .model
                .to_ascii_lowercase()
                .contains(&t.to_ascii_lowercase())
        });
        model_ok && job.gpu_mem_mib.is_none_or(|m| attrs.memory_mib >= m)
    }

    fn link(&self, a: u32, b: u32) -> u32 {
        match (self.position(a), self.position(b)) {
            (Some(pa), Some(pb)) => self
                .links
                .get(pa)
                .and_then(|row| row.get(pb))
                .copied()
                .unwrap_or(0) as u32,
            _ => 0,
        }
    }

    /// GPUs of this node that suit the job, free or not.
    pub fn suitable(&self, job: &PendingJob) -> u32 {
        if !job.is_constrained() {
            return self.gpus.len() as u32;
        }
        (0..self.gpus.len())
            .filter(|&p| self.suits_at(job, p))
            .count() as u32
    }

    /// The node's kind: GPU count, model(s) and interconnect.
    pub fn kind(&self) -> NodeKind {
        let mut models: Vec<&str> = Vec::new();
        for a in &self.attrs {
            if !models.contains(&a.model.as_str()) {
                models.push(&a.model);
            }
        }
        NodeKind {
            gpus: self.gpus.len() as u32,
            model: models.join("+"),
            interconnect: self.interconnect.clone(),
        }
    }

    /// Whether a multi-node job may put ranks on both nodes: same GPU count,
    /// same GPUs (model and memory, in order) and same interconnect. Cheaper
    /// than comparing [`Node::kind`]s.
    pub(super) fn same_kind(&self, other: &Node) -> bool {
        self.gpus.len() == other.gpus.len()
            && self.interconnect == other.interconnect
            && self.attrs == other.attrs
    }

    /// `k` of the candidate GPUs with the best interconnect among them (greedy
    /// from each start; ties keep the lowest indices).
    pub(super) fn pick(&self, candidates: &[u32], k: usize) -> Vec<u32> {
        if k <= 1 || self.links.is_empty() || candidates.len() <= k {
            return candidates.iter().copied().take(k).collect();
        }
        let mut best: Option<(u32, Vec<u32>)> = None;
        for &start in candidates {
            let mut chosen = vec![start];
            let mut score = 0;
            while chosen.len() < k {
                let (gain, next) = candidates
                    .iter()
                    .filter(|c| !chosen.contains(c))
                    .map(|&c| (chosen.iter().map(|&s| self.link(c, s)).sum::<u32>(), c))
                    .max_by_key(|&(gain, c)| (gain, std::cmp::Reverse(c)))
                    .expect("enough candidates");
                score += gain;
                chosen.push(next);
            }
            chosen.sort_unstable();
            if best
                .as_ref()
                .is_none_or(|(s, b)| score > *s || (score == *s && chosen < *b))
            {
                best = Some((score, chosen));
            }
        }
        best.map(|(_, g)| g).unwrap_or_default()
    }
}
