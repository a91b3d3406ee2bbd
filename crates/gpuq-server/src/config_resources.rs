//! `[resources]` of gpuq.toml: the CPU cores and memory a job gets when its
//! spec does not say, and the memory kept for the system.
//!
//! ```toml
//! [resources]
//! cpus_per_gpu = 8          # default: the node's cores / its GPUs, rounded down (0 where that is under 2)
//! memory_per_gpu = "64G"    # default: the node's allocatable memory / its GPUs, rounded down
//! cpus = 0                  # cores a CPU-only job reserves when it does not ask (default 0: none)
//! memory_per_cpu = "4G"     # memory per reserved core for a job the per-GPU share does not cover
//!                           # (default: allocatable memory / the node's cores); also the memory
//!                           # cap (not a reservation) of a job that holds none: × max(cores, 1)
//! system_memory = "4G"      # kept for the system and the daemon (default: 10% of the node's, at most 4G)
//! ```

use gpuq_core::{MemSize, Node, ResourceDefaults};
use serde::{Deserialize, Deserializer};

/// `[resources]`. Every key is optional; `None` takes the node's fair share.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesConfig {
    /// Cores per GPU for a GPU job without `cpus` (Slurm's DefCpuPerGPU).
    pub cpus_per_gpu: Option<u32>,
    /// Memory per GPU (MiB) for a GPU job without `memory` (Slurm's
    /// DefMemPerGPU); `"0"`: none reserved.
    #[serde(default, deserialize_with = "mem_or_zero")]
    pub memory_per_gpu: Option<u64>,
    /// Cores a CPU-only job without `cpus` reserves. 0 (the default): none;
    /// it runs on the cores no job reserved. One core per job would make a
    /// small machine run its CPU-only jobs one or two at a time.
    #[serde(default)]
    pub cpus: u32,
    /// Memory per reserved core (MiB); `"0"`: none reserved. Also the cap
    /// of a job that reserves no memory (per core, at least one): a limit
    /// the scheduler does not count (`gpuq_core::memory_limit_mib`).
    #[serde(default, deserialize_with = "mem_or_zero")]
    pub memory_per_cpu: Option<u64>,
    /// Memory kept for the system and the daemon: not allocatable to jobs.
    pub system_memory: Option<MemSize>,
}

/// A memory size, or 0 (`"0"` or `0`) for none.
fn mem_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    let text = match Raw::deserialize(d)? {
        Raw::Number(0) => return Ok(Some(0)),
        Raw::Number(n) => n.to_string(),
        Raw::Text(t) if t.trim() == "0" => return Ok(Some(0)),
        Raw::Text(t) => t,
    };
    text.parse::<MemSize>()
        .map(|m| Some(m.mib()))
        .map_err(serde::de::Error::custom)
}

/// Largest sensible values: beyond them a key is a typo.
const MAX_CPUS: u32 = gpuq_core::resources::MAX_CPUS_PER_JOB;

/// What this machine offers jobs: the cores the daemon may run on (its CPU
/// affinity, as `nproc` counts them) and its memory less the system's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub cpus: u32,
    pub memory_mib: u64,
}

/// MemTotal of /proc/meminfo, in MiB (`None` where it cannot be read).
fn mem_total_mib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

impl ResourcesConfig {
    /// This machine's schedulable cores and memory. Unreadable memory counts
    /// as 0 (not counted): jobs are then placed by GPUs and cores alone.
    pub fn local_capacity(&self) -> Capacity {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get() as u32);
        let memory_mib = mem_total_mib().map_or(0, |total| {
            total.saturating_sub(self.system_memory_mib(total))
        });
        Capacity { cpus, memory_mib }
    }

    /// Refuses values no node could honour, naming the key.
    pub fn check(&self) -> Result<(), String> {
        for (key, value) in [
            ("cpus_per_gpu", self.cpus_per_gpu),
            ("cpus", Some(self.cpus)),
        ] {
            if let Some(v) = value.filter(|&v| v > MAX_CPUS) {
                return Err(format!(
                    "resources.{key}: {v} cores is more than any node has; give at most {MAX_CPUS} (0: none reserved)"
                ));
            }
        }
        let min = gpuq_core::resources::MIN_MEMORY_MIB;
        for (key, value) in [
            ("memory_per_gpu", self.memory_per_gpu),
            ("memory_per_cpu", self.memory_per_cpu),
        ] {
            if let Some(v) = value.filter(|&v| v > 0 && v < min) {
                return Err(format!(
                    "resources.{key}: {v}M is too little for a job; give at least {min}M, or \"0\" for none reserved"
                ));
            }
        }
        Ok(())
    }

    /// Memory kept for the system on a node with `total_mib`: the configured
    /// amount, else 10% of it, at most 4 GiB.
    pub fn system_memory_mib(&self, total_mib: u64) -> u64 {
        match self.system_memory {
            Some(m) => m.mib(),
            None => (total_mib / 10).min(4096),
        }
    }

    /// What a job on `node` gets when its spec does not say: the configured
    /// values, else the node's fair shares. A node that counts no cores or
    /// memory (capacity 0: Slurm's, whose own limits apply) gets no default
    /// share of what it does not count.
    pub fn defaults(&self, node: &Node) -> ResourceDefaults {
        let fair = ResourceDefaults::fair_share(node.cpus, node.memory_mib, node.gpus.len() as u32);
        let counted = |v: u64, capacity: u64| if capacity == 0 { 0 } else { v };
        ResourceDefaults {
            cpus_per_gpu: counted(
                self.cpus_per_gpu.unwrap_or(fair.cpus_per_gpu).into(),
                node.cpus.into(),
            ) as u32,
            memory_mib_per_gpu: counted(
                self.memory_per_gpu.unwrap_or(fair.memory_mib_per_gpu),
                node.memory_mib,
            ),
            cpus_cpu_only: counted(self.cpus.into(), node.cpus.into()) as u32,
            memory_mib_per_cpu: counted(
                self.memory_per_cpu
                    .unwrap_or(node.memory_mib / u64::from(node.cpus.max(1))),
                node.memory_mib,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ResourcesConfig, String> {
        #[derive(Deserialize)]
        struct Top {
            resources: ResourcesConfig,
        }
        let c = toml::from_str::<Top>(text)
            .map_err(|e| e.to_string())?
            .resources;
        c.check()?;
        Ok(c)
    }

    fn node(cpus: u32, memory_mib: u64, gpus: u32) -> Node {
        Node {
            gpus: (0..gpus).collect(),
            cpus,
            memory_mib,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_the_nodes_fair_share() {
        let d = ResourcesConfig::default().defaults(&node(64, 512 * 1024, 8));
        assert_eq!((d.cpus_per_gpu, d.memory_mib_per_gpu), (8, 64 * 1024));
        assert_eq!((d.cpus_cpu_only, d.memory_mib_per_cpu), (0, 8 * 1024));
        // This kind of test machine: 2 cores, 8 simulated GPUs: no core reserved per GPU.
        let d = ResourcesConfig::default().defaults(&node(2, 20 * 1024, 8));
        assert_eq!(d.cpus_per_gpu, 0);
        // Slurm's nodes count nothing: no default share.
        let d = ResourcesConfig::default().defaults(&node(0, 0, 8));
        assert_eq!(d, ResourceDefaults::default());
    }

    #[test]
    fn configured_values_win() {
        let c = parse(
            "[resources]\ncpus_per_gpu = 4\nmemory_per_gpu = \"16G\"\ncpus = 1\nmemory_per_cpu = \"0\"\nsystem_memory = \"8G\"\n",
        )
        .unwrap();
        let d = c.defaults(&node(64, 512 * 1024, 8));
        assert_eq!(
            d,
            ResourceDefaults {
                cpus_per_gpu: 4,
                memory_mib_per_gpu: 16 * 1024,
                cpus_cpu_only: 1,
                memory_mib_per_cpu: 0
            }
        );
        assert_eq!(c.system_memory_mib(100_000), 8192);
        assert_eq!(
            ResourcesConfig::default().system_memory_mib(24 * 1024),
            2457
        );
        assert_eq!(
            ResourcesConfig::default().system_memory_mib(512 * 1024),
            4096
        );
    }

    #[test]
    fn this_machine_offers_its_cores_and_memory_less_the_systems() {
        let c = ResourcesConfig::default().local_capacity();
        let nproc = std::thread::available_parallelism().unwrap().get() as u32;
        assert_eq!(c.cpus, nproc);
        let total = mem_total_mib().unwrap();
        assert_eq!(c.memory_mib, total - (total / 10).min(4096));
        let kept = ResourcesConfig {
            system_memory: Some("1G".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(kept.local_capacity().memory_mib, total - 1024);
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = parse("[resources]\ncpus_per_gpu = 100000\n").unwrap_err();
        assert!(e.contains("resources.cpus_per_gpu"), "{e}");
        let e = parse("[resources]\nmemory_per_gpu = \"4M\"\n").unwrap_err();
        assert!(
            e.contains("resources.memory_per_gpu") && e.contains("16M"),
            "{e}"
        );
        let e = parse("[resources]\nmemory_per_cpu = \"lots\"\n").unwrap_err();
        assert!(e.contains("memory_per_cpu") && e.contains("40G"), "{e}");
        let e = parse("[resources]\ncores = 2\n").unwrap_err();
        assert!(e.contains("cores"), "{e}");
    }
}
