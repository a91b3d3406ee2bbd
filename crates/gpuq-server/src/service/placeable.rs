//! Whether a job could ever run on this backend's nodes: checked at submit, so a
//! job no node (or set of whole nodes of one kind) could hold is refused with
//! the field at fault instead of waiting forever.

use super::{Service, ServiceError};
use gpuq_core::{PendingJob, SpecError};
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
            ..super::pending_probe()
        };
        if gpuq_core::scheduler::can_ever_place(&probe, &self.nodes) {
            return Ok(());
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
}
