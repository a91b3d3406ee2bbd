//! CPU cores and host memory as resources a job asks for and gets: the
//! spec's `cpus` and `memory`, the daemon's defaults for a job that does not
//! say (a share per GPU, like Slurm's DefCpuPerGPU and DefMemPerGPU), and the
//! amounts the scheduler places and the cgroup enforces.

use crate::{JobSpec, SpecError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// More cores than this on one node is a typo, not a request.
pub const MAX_CPUS_PER_JOB: u32 = 4096;
/// A GPU's default share of cores below this is no share at all (see
/// [`ResourceDefaults::fair_share`]).
pub const MIN_CPUS_PER_GPU: u32 = 2;
/// Less memory than this cannot hold a Python interpreter: a limit below it is
/// a unit mistake (`--mem 64` is 64 GiB; `--mem 64K` is refused by the parser).
pub const MIN_MEMORY_MIB: u64 = 16;

/// What a job holds on each of its nodes besides GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct JobResources {
    /// Cores reserved for it; 0: none (it runs on the cores no job reserved).
    pub cpus: u32,
    /// Memory reserved for it, in MiB, and its limit; 0: none reserved (its
    /// limit is then the one all jobs share).
    pub memory_mib: u64,
}

impl JobResources {
    /// Reserves nothing: the scheduler counts no cores or memory for it.
    pub fn is_none(&self) -> bool {
        self.cpus == 0 && self.memory_mib == 0
    }
}

impl std::fmt::Display for JobResources {
    /// "8 cores, 64 GiB", "no reserved cores, 4 GiB", "1 core, no reserved memory".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cpus {
            0 => f.write_str("no reserved cores")?,
            n => f.write_str(&crate::plural(n.into(), "core"))?,
        }
        match self.memory_mib {
            0 => f.write_str(", no reserved memory"),
            m => write!(f, ", {}", mib_text(m)),
        }
    }
}

/// A memory amount for people: "64 GiB", "1.5 GiB", "512 MiB".
pub fn mib_text(mib: u64) -> String {
    if mib >= 1024 {
        let gib = mib as f64 / 1024.0;
        if mib.is_multiple_of(1024) {
            format!("{} GiB", mib / 1024)
        } else {
            format!("{gib:.1} GiB")
        }
    } else {
        format!("{mib} MiB")
    }
}

/// What a job gets when its spec does not say (`[resources]` in gpuq.toml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceDefaults {
    /// Cores per GPU for a GPU job without `cpus`.
    pub cpus_per_gpu: u32,
    /// Memory per GPU (MiB) for a GPU job without `memory`.
    pub memory_mib_per_gpu: u64,
    /// Cores for a CPU-only job without `cpus`; 0: none reserved.
    pub cpus_cpu_only: u32,
    /// Memory per reserved core (MiB) for a job without `memory` that the
    /// per-GPU share does not cover (a CPU-only job).
    pub memory_mib_per_cpu: u64,
}

impl ResourceDefaults {
    /// The node's fair shares per GPU, as Slurm's DefCpuPerGPU and
    /// DefMemPerGPU would be set for a node of `cpus` cores, `memory_mib` of
    /// allocatable memory and `gpus` GPUs: each rounded down, so the GPUs'
    /// shares together never exceed the node. Where a GPU's share would be
    /// under 2 cores (GPUs outnumber or match the cores: a small box, or many
    /// simulated GPUs) it is 0: no GPU job reserves a core, and they share the
    /// node's cores as without reservations. One pinned core per GPU job
    /// starves its data loading and whatever else it runs beside the GPU.
    pub fn fair_share(cpus: u32, memory_mib: u64, gpus: u32) -> ResourceDefaults {
        if gpus == 0 {
            return ResourceDefaults::default();
        }
        let share = cpus / gpus;
        ResourceDefaults {
            cpus_per_gpu: if share >= MIN_CPUS_PER_GPU { share } else { 0 },
            memory_mib_per_gpu: memory_mib / u64::from(gpus),
            cpus_cpu_only: 0,
            memory_mib_per_cpu: 0,
        }
    }
}

/// What `spec` holds on each of its nodes: its own `cpus` and `memory` where
/// given, else the defaults (per GPU for a GPU job; `cpus_cpu_only` and
/// memory per core for a CPU-only one, or where no per-GPU memory is set).
pub fn effective(spec: &JobSpec, d: &ResourceDefaults) -> JobResources {
    let gpus = spec.gpus;
    let cpus = spec.cpus.unwrap_or(if gpus > 0 {
        d.cpus_per_gpu.saturating_mul(gpus)
    } else {
        d.cpus_cpu_only
    });
    let memory_mib = match spec.memory {
        Some(m) => m.mib(),
        None if gpus > 0 && d.memory_mib_per_gpu > 0 => {
            d.memory_mib_per_gpu.saturating_mul(gpus.into())
        }
        None => d.memory_mib_per_cpu.saturating_mul(cpus.into()),
    };
    JobResources { cpus, memory_mib }
}

/// The memory limit (MiB) the job runs under: its reserved memory where it
/// holds some, else a cap that is not a reservation, `memory_mib_per_cpu` ×
/// its cores (at least one), so a job that asked for no memory (a CPU-only job
/// by default) cannot grow over its neighbours: the scheduler counts nothing
/// for it, but the kernel stops it at the cap. 0 only where the node counts no
/// memory (Slurm's, whose own limits apply) or `memory_per_cpu = "0"`.
pub fn memory_limit_mib(res: &JobResources, d: &ResourceDefaults) -> u64 {
    if res.memory_mib > 0 {
        return res.memory_mib;
    }
    d.memory_mib_per_cpu.saturating_mul(res.cpus.max(1).into())
}

/// The spec's own checks of `cpus` and `memory` (what no node could be asked).
pub(crate) fn check_spec(spec: &JobSpec) -> Result<(), SpecError> {
    if let Some(n) = spec.cpus {
        if n == 0 {
            return Err(SpecError::new(
                "cpus",
                "0 cores: give at least 1, or leave cpus out for the daemon's default",
            ));
        }
        if n > MAX_CPUS_PER_JOB {
            return Err(SpecError::new(
                "cpus",
                format!("{n} cores is more than any node has; the limit is {MAX_CPUS_PER_JOB}"),
            ));
        }
    }
    if let Some(m) = spec.memory {
        if m.mib() < MIN_MEMORY_MIB {
            return Err(SpecError::new(
                "memory",
                format!(
                    "{m} is too little for a job to start in; give at least {MIN_MEMORY_MIB}M \
                     (a bare number is GiB: --mem 64 means 64G)"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(gpus: u32, cpus: Option<u32>, memory: Option<&str>) -> JobSpec {
        JobSpec {
            command: Some(vec!["x".into()]),
            gpus,
            cpus,
            memory: memory.map(|m| m.parse().unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn every_job_gets_a_memory_limit_even_with_none_reserved() {
        // The node's defaults: 64 cores, 512 GiB allocatable, CPU-only jobs
        // reserve nothing.
        let d = ResourceDefaults {
            cpus_per_gpu: 8,
            memory_mib_per_gpu: 64 * 1024,
            cpus_cpu_only: 0,
            memory_mib_per_cpu: 8 * 1024,
        };
        let cpu_only = effective(&spec(0, None, None), &d);
        assert_eq!(cpu_only.memory_mib, 0, "a cap, not a reservation");
        assert_eq!(memory_limit_mib(&cpu_only, &d), 8 * 1024);
        let four = effective(&spec(0, Some(4), None), &d);
        assert_eq!(memory_limit_mib(&four, &d), 32 * 1024);
        // Reserved memory is the limit.
        let asked = effective(&spec(0, None, Some("2G")), &d);
        assert_eq!(memory_limit_mib(&asked, &d), 2048);
        let gpu = effective(&spec(2, None, None), &d);
        assert_eq!(memory_limit_mib(&gpu, &d), 128 * 1024);
        // A node that counts no memory (Slurm's): none here.
        assert_eq!(memory_limit_mib(&cpu_only, &ResourceDefaults::default()), 0);
    }

    #[test]
    fn explicit_values_win_over_the_defaults() {
        let d = ResourceDefaults {
            cpus_per_gpu: 4,
            memory_mib_per_gpu: 8192,
            cpus_cpu_only: 1,
            memory_mib_per_cpu: 1024,
        };
        let got = |s: &JobSpec| effective(s, &d);
        assert_eq!(
            got(&spec(2, None, None)),
            JobResources {
                cpus: 8,
                memory_mib: 16384
            }
        );
        assert_eq!(
            got(&spec(2, Some(3), None)),
            JobResources {
                cpus: 3,
                memory_mib: 16384
            }
        );
        assert_eq!(
            got(&spec(2, None, Some("1G"))),
            JobResources {
                cpus: 8,
                memory_mib: 1024
            }
        );
        // A CPU-only job: its cores, and memory per core.
        assert_eq!(
            got(&spec(0, None, None)),
            JobResources {
                cpus: 1,
                memory_mib: 1024
            }
        );
        assert_eq!(
            got(&spec(0, Some(4), None)),
            JobResources {
                cpus: 4,
                memory_mib: 4096
            }
        );
        assert_eq!(
            got(&spec(0, Some(4), Some("512M"))),
            JobResources {
                cpus: 4,
                memory_mib: 512
            }
        );
        // No defaults: a job reserves only what it asks for.
        let none = ResourceDefaults::default();
        assert!(effective(&spec(4, None, None), &none).is_none());
        assert_eq!(
            effective(&spec(4, None, Some("2G")), &none),
            JobResources {
                cpus: 0,
                memory_mib: 2048
            }
        );
    }

    #[test]
    fn the_fair_share_rounds_down_and_is_zero_under_two_cores_per_gpu() {
        let d = ResourceDefaults::fair_share(64, 500 * 1024, 8);
        assert_eq!((d.cpus_per_gpu, d.memory_mib_per_gpu), (8, 64000));
        let d = ResourceDefaults::fair_share(2, 20 * 1024, 8);
        assert_eq!((d.cpus_per_gpu, d.memory_mib_per_gpu), (0, 2560));
        // One core per GPU is no share: they share the cores.
        assert_eq!(ResourceDefaults::fair_share(2, 1024, 2).cpus_per_gpu, 0);
        assert_eq!(ResourceDefaults::fair_share(3, 1024, 2).cpus_per_gpu, 0);
        assert_eq!(ResourceDefaults::fair_share(2, 1024, 1).cpus_per_gpu, 2);
        assert_eq!(
            ResourceDefaults::fair_share(16, 1024, 0),
            ResourceDefaults::default()
        );
        // Eight one-GPU jobs never take more than the node.
        let d = ResourceDefaults::fair_share(30, 1000, 8);
        assert!(d.cpus_per_gpu * 8 <= 30 && d.memory_mib_per_gpu * 8 <= 1000);
    }

    #[test]
    fn refuses_what_no_node_could_be_asked_naming_the_field() {
        let e = spec(0, Some(0), None).validate().unwrap_err();
        assert_eq!(e.field, "cpus");
        assert!(e.message.contains("at least 1"), "{e}");
        let e = spec(0, Some(100_000), None).validate().unwrap_err();
        assert_eq!(e.field, "cpus");
        let e = spec(0, None, Some("8M")).validate().unwrap_err();
        assert_eq!(e.field, "memory");
        assert!(e.message.contains("at least 16M"), "{e}");
        spec(1, Some(8), Some("64G")).validate().unwrap();
        spec(0, Some(1), Some("16M")).validate().unwrap();
    }

    #[test]
    fn reads_from_yaml_and_writes_back() {
        let s: JobSpec =
            serde_json::from_str(r#"{"command":["x"],"cpus":8,"memory":"64G"}"#).unwrap();
        assert_eq!((s.cpus, s.memory.map(|m| m.mib())), (Some(8), Some(65536)));
        let back = serde_json::to_string(&s).unwrap();
        assert!(
            back.contains(r#""cpus":8"#) && back.contains(r#""memory":"64G""#),
            "{back}"
        );
        let plain = serde_json::to_string(&spec(0, None, None)).unwrap();
        assert!(
            !plain.contains("cpus") && !plain.contains("memory"),
            "{plain}"
        );
    }

    #[test]
    fn says_amounts_as_people_read_them() {
        assert_eq!(mib_text(65536), "64 GiB");
        assert_eq!(mib_text(1536), "1.5 GiB");
        assert_eq!(mib_text(512), "512 MiB");
        assert_eq!(
            JobResources {
                cpus: 8,
                memory_mib: 65536
            }
            .to_string(),
            "8 cores, 64 GiB"
        );
        assert_eq!(
            JobResources::default().to_string(),
            "no reserved cores, no reserved memory"
        );
    }
}
