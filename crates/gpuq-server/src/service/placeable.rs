//! Whether a job could ever run on this backend's nodes: checked at submit, so a
//! job no node (or set of whole nodes of one kind) could hold is refused with
//! the field at fault instead of waiting forever.

use super::{Service, ServiceError};
use gpuq_core::{resources, JobResources, PendingJob, SpecError};
use std::sync::Arc;

impl Service {
    /// Refuses, naming the field, a job no node (or set of whole nodes) of this
    /// backend could ever hold.
    pub(super) fn check_placeable(&self, spec: &gpuq_core::JobSpec) -> Result<(), ServiceError> {
        let probe = PendingJob {
            gpus: spec.gpus,
            nodes: spec.nodes,
            gpu_type: spec.gpu_type.as_deref().map(Arc::from),
            gpu_mem_mib: spec.gpu_mem.map(|m| m.mib()),
            resources: gpuq_core::effective(spec, &self.resource_defaults()),
            ..super::pending_probe()
        };
        if gpuq_core::scheduler::can_ever_place(&probe, &self.nodes) {
            return Ok(());
        }
        let by_gpus = PendingJob {
            resources: Default::default(),
            ..probe.clone()
        };
        if gpuq_core::scheduler::can_ever_place(&by_gpus, &self.nodes) {
            return Err(self.host_too_large(spec, &probe.resources).into());
        }
        let largest = self.largest_node_gpus();
        let nodes = spec.nodes.unwrap_or(1);
        let node_count = self.nodes.len() as u32;
        if nodes > node_count {
            return Err(SpecError::new(
                "nodes",
                format!(
                    "{nodes} nodes: this daemon's backend has {}; multi-node jobs need a cluster \
                     (the Slurm backend: backend = \"slurm\" in gpuq.toml)",
                    gpuq_core::plural(node_count.into(), "node")
                ),
            )
            .into());
        }
        let too_large = spec.gpus > largest && node_count <= 1;
        if (spec.gpu_type.is_some() || spec.gpu_mem.is_some()) && !too_large {
            let mut models: Vec<String> = self
                .gpus
                .iter()
                .map(|g| format!("{} ({} MiB)", g.model, g.memory_mib))
                .collect();
            models.dedup();
            let field = if spec.gpu_type.is_some() {
                "gpu_type"
            } else {
                "gpu_mem"
            };
            return Err(SpecError::new(
                field,
                format!(
                    "no node has {}; the GPUs here are: {}",
                    gpuq_core::plural(spec.gpus.max(1).into(), "such GPU"),
                    if models.is_empty() {
                        "none".to_string()
                    } else {
                        models.join(", ")
                    }
                ),
            )
            .into());
        }
        // A daemon without GPUs (no driver, or --gpus none) refuses every --gpus N: say how to try gpuq anyway.
        let hint = if largest == 0 {
            super::NO_GPUS_HINT
        } else {
            ""
        };
        let whole = if node_count > 1 {
            " and not enough whole nodes of one kind hold it"
        } else {
            ""
        };
        Err(SpecError::new(
            "gpus",
            format!(
                "job asks for {}; the largest node has {largest}{whole}{hint}",
                gpuq_core::plural(spec.gpus.into(), "GPU")
            ),
        )
        .into())
    }

    /// A job that fits by GPUs but asks for more cores or memory than any
    /// node has for jobs: the field at fault, with the most it may ask.
    fn host_too_large(&self, spec: &gpuq_core::JobSpec, res: &JobResources) -> SpecError {
        let counted =
            |f: fn(&gpuq_core::Node) -> u64| self.nodes.iter().map(f).filter(|&v| v > 0).max();
        // Where the amount is the daemon's default, say so: the fix is then in gpuq.toml or a flag.
        let from_default = |field: &str, key: &str| {
            if field == "cpus" && spec.cpus.is_none() || field == "memory" && spec.memory.is_none()
            {
                format!(" (the default, from [resources] {key} in gpuq.toml)")
            } else {
                String::new()
            }
        };
        match counted(|n| n.cpus.into()) {
            Some(most) if u64::from(res.cpus) > most => SpecError::new(
                "cpus",
                format!(
                    "{}{}: the most a node has for jobs is {most}; ask for at most --cpus {most}",
                    gpuq_core::plural(res.cpus.into(), "core"),
                    from_default("cpus", "cpus_per_gpu")
                ),
            ),
            _ => {
                let most = counted(|n| n.memory_mib).unwrap_or(0);
                SpecError::new(
                    "memory",
                    format!(
                        "{}{}: the most a node has for jobs is {} (its memory less [resources] \
                         system_memory); ask for at most --mem {}",
                        resources::mib_text(res.memory_mib),
                        from_default("memory", "memory_per_gpu"),
                        resources::mib_text(most),
                        gpuq_core::MemSize::from_mib(most)
                    ),
                )
            }
        }
    }
}
