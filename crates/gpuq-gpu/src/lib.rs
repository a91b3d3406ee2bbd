//! GPU discovery: NVML (loaded at run time, so no driver is needed to build or
//! run gpuq), simulated devices, or none.

use serde::Serialize;
use std::str::FromStr;

pub mod telemetry;
pub use telemetry::{Sample, SimLoad, Telemetry};

/// Names the NVML library to load instead of `libnvidia-ml.so.1` from the
/// loader's search path (a driver in an unusual place, or a test stand-in).
pub const NVML_LIBRARY_ENV: &str = "GPUQ_NVML_LIBRARY";

/// Loads and initialises NVML. No library, or no driver behind it, is an error
/// the callers turn into "no GPUs".
pub(crate) fn init_nvml() -> Result<nvml_wrapper::Nvml, nvml_wrapper::error::NvmlError> {
    match std::env::var_os(NVML_LIBRARY_ENV) {
        Some(path) if !path.is_empty() => nvml_wrapper::Nvml::builder().lib_path(&path).init(),
        _ => nvml_wrapper::Nvml::init(),
    }
}

/// One GPU as the scheduler and `gpuq gpus` see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// Index in nvidia-smi (PCI bus) order: the value put in CUDA_VISIBLE_DEVICES.
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
    /// The device's minor number: its node is `/dev/nvidiaN` (character device
    /// 195:N), which is not always its index. `None`: NVML could not say.
    /// A simulated GPU i stands for 195:i.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// The PCI bus id (`00000000:07:00.0`), which names its NUMA-local CPUs in
    /// sysfs; `None` for simulated GPUs or when NVML could not say.
    #[serde(skip)]
    pub bus_id: Option<String>,
}

/// Where the GPUs come from: `--gpus auto|none|sim:N|sim:2xA100:80,2xL4:24`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSource {
    Auto,
    None,
    /// Simulated GPUs: (count, model, memory in GiB) groups, in index order.
    Simulated(Vec<(u32, String, u64)>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--gpus {0:?} is not understood; use auto, none, sim:N (N simulated GPUs, e.g. sim:4) \
     or sim:COUNTxMODEL:GIB,… (e.g. sim:2xA100:80,2xL4:24)"
)]
pub struct GpuSourceError(String);

const SIM_MODEL: &str = "Simulated GPU 80GB";

impl FromStr for GpuSource {
    type Err = GpuSourceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || GpuSourceError(s.to_string());
        match s {
            "auto" => Ok(GpuSource::Auto),
            "none" => Ok(GpuSource::None),
            _ => {
                let spec = s.strip_prefix("sim:").ok_or_else(err)?;
                if let Ok(n) = spec.parse::<u32>() {
                    return if n <= 1024 {
                        Ok(GpuSource::Simulated(vec![(n, SIM_MODEL.into(), 80)]))
                    } else {
                        Err(err())
                    };
                }
                let mut groups = Vec::new();
                for part in spec.split(',') {
                    let (count, rest) = part.split_once('x').ok_or_else(err)?;
                    let (model, mem) = rest.rsplit_once(':').ok_or_else(err)?;
                    let count: u32 = count.parse().map_err(|_| err())?;
                    let mem: u64 = mem.parse().map_err(|_| err())?;
                    if model.is_empty() || mem == 0 {
                        return Err(err());
                    }
                    groups.push((count, format!("Simulated {model}"), mem));
                }
                let total: u32 = groups.iter().map(|g| g.0).sum();
                if total > 1024 {
                    return Err(err());
                }
                Ok(GpuSource::Simulated(groups))
            }
        }
    }
}

/// The result of discovery, with a line for the daemon log saying what was found.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub gpus: Vec<GpuInfo>,
    /// Interconnect quality between GPUs (same order), higher is better:
    /// 3 same board or switch, 2 same PCIe host bridge, 1 same CPU, 0 across CPUs.
    pub links: Vec<Vec<u8>>,
    pub summary: String,
    /// The driver behind the GPUs (NVML only).
    pub driver: DriverInfo,
}

/// The NVIDIA driver's version and the CUDA version it supports, as NVML
/// reports them; `None` without NVML (no driver, simulated GPUs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverInfo {
    /// e.g. `550.54.15`.
    pub version: Option<String>,
    /// e.g. `12.4`.
    pub cuda_version: Option<String>,
}

/// NVML's CUDA version number (`12040`) as people write it (`12.4`).
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

pub fn discover(source: &GpuSource) -> Discovery {
    match source {
        GpuSource::None => Discovery {
            gpus: vec![],
            links: vec![],
            summary: "GPUs disabled (--gpus none)".into(),
            driver: DriverInfo::default(),
        },
        GpuSource::Simulated(groups) => {
            let gpus = simulated(groups);
            // Simulated topology: islands of four linked GPUs, nothing between islands.
            let links = (0..gpus.len()).map(|a| (0..gpus.len()).map(|b| if a / 4 == b / 4 { 3 } else { 0 }).collect()).collect();
            let summary = format!(
                "{}; jobs run for real, the devices are pretend (topology: islands of 4)",
                gpuq_core::plural(gpus.len() as u64, "simulated GPU")
            );
            Discovery { gpus, links, summary, driver: DriverInfo::default() }
        }
        GpuSource::Auto => match nvml::discover() {
            Ok((gpus, links, driver)) => {
                let summary = format!("NVML: {} found", gpuq_core::plural(gpus.len() as u64, "GPU"));
                Discovery { gpus, links, summary, driver }
            }
            Err(why) => Discovery {
                gpus: vec![],
                links: vec![],
                driver: DriverInfo::default(),
                summary: format!("no NVIDIA driver found ({why}); running without GPUs (CPU-only jobs still run)"),
            },
        },
    }
}

fn simulated(groups: &[(u32, String, u64)]) -> Vec<GpuInfo> {
    let mut gpus = Vec::new();
    for (count, model, gib) in groups {
        for _ in 0..*count {
            let i = gpus.len() as u32;
            gpus.push(GpuInfo {
                index: i,
                uuid: format!("GPU-5157{i:04x}-0000-4000-8000-000000000000"),
                model: model.clone(),
                memory_mib: gib * 1024,
                minor: Some(i),
                bus_id: None,
            });
        }
    }
    gpus
}

mod nvml {
    use super::{DriverInfo, GpuInfo};
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;

    /// The devices, their links (as in `Discovery`) and the driver.
    pub type Found = (Vec<GpuInfo>, Vec<Vec<u8>>, DriverInfo);

    /// Initialises NVML (dlopen of libnvidia-ml.so.1) and lists the devices with
    /// their topology, and the driver.
    pub fn discover() -> Result<Found, String> {
        let nvml = crate::init_nvml().map_err(|e| e.to_string())?;
        // Either may be missing from an old driver: then unknown, not an error.
        let driver = DriverInfo {
            version: nvml.sys_driver_version().ok(),
            cuda_version: nvml
                .sys_cuda_driver_version()
                .ok()
                .map(super::cuda_version_text),
        };
        let count = nvml.device_count().map_err(|e| e.to_string())?;
        let mut gpus = Vec::with_capacity(count as usize);
        for i in 0..count {
            let dev = nvml
                .device_by_index(i)
                .map_err(|e| format!("device {i}: {e}"))?;
            gpus.push(GpuInfo {
                index: i,
                uuid: dev.uuid().unwrap_or_else(|_| format!("GPU-unknown-{i}")),
                model: dev.name().unwrap_or_else(|_| "unknown".into()),
                memory_mib: dev
                    .memory_info()
                    .map(|m| m.total / (1024 * 1024))
                    .unwrap_or(0),
                minor: dev.minor_number().ok(),
                bus_id: dev.pci_info().ok().map(|p| p.bus_id),
            });
        }
        let n = count as usize;
        let level = |a: usize, b: usize| {
            let da = nvml.device_by_index(a as u32)?;
            let db = nvml.device_by_index(b as u32)?;
            nvml.topology_common_ancestor(&da, &db)
        };
        let links: Vec<Vec<u8>> = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| match (a == b, level(a, b)) {
                        (true, _) => 0,
                        (
                            _,
                            Ok(
                                TopologyLevel::Internal
                                | TopologyLevel::Single
                                | TopologyLevel::Multiple,
                            ),
                        ) => 3,
                        (_, Ok(TopologyLevel::HostBridge)) => 2,
                        (_, Ok(TopologyLevel::Node)) => 1,
                        _ => 0,
                    })
                    .collect()
            })
            .collect();
        Ok((gpus, links, driver))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_gpu_flag() {
        assert_eq!("auto".parse(), Ok(GpuSource::Auto));
        assert_eq!("none".parse(), Ok(GpuSource::None));
        assert_eq!(
            "sim:4".parse(),
            Ok(GpuSource::Simulated(vec![(4, SIM_MODEL.into(), 80)]))
        );
        let mixed: GpuSource = "sim:2xA100:80,1xL4:24".parse().unwrap();
        let d = discover(&mixed);
        assert_eq!(
            d.gpus
                .iter()
                .map(|g| (g.model.as_str(), g.memory_mib))
                .collect::<Vec<_>>(),
            [
                ("Simulated A100", 81920),
                ("Simulated A100", 81920),
                ("Simulated L4", 24576)
            ]
        );
        for bad in [
            "",
            "sim:",
            "sim:x",
            "sim:-1",
            "4",
            "sim:99999",
            "sim:2xA100",
            "sim:xA100:80",
            "sim:2xA100:0",
        ] {
            assert!(bad
                .parse::<GpuSource>()
                .unwrap_err()
                .to_string()
                .contains("sim:N"));
        }
    }

    #[test]
    fn cuda_versions_read_as_people_write_them() {
        assert_eq!(cuda_version_text(12040), "12.4");
        assert_eq!(cuda_version_text(11080), "11.8");
        assert_eq!(cuda_version_text(12000), "12.0");
    }

    #[test]
    fn simulated_gpus_have_distinct_indices_and_uuids() {
        let d = discover(&"sim:3".parse().unwrap());
        assert_eq!(
            d.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let uuids: std::collections::HashSet<_> = d.gpus.iter().map(|g| &g.uuid).collect();
        assert_eq!(uuids.len(), 3);
    }

    #[test]
    fn auto_without_a_driver_degrades_to_no_gpus() {
        // No libnvidia-ml on this machine: discovery must not fail, just report none.
        if std::path::Path::new("/dev/nvidia0").exists() {
            return;
        }
        let d = discover(&GpuSource::Auto);
        assert!(d.gpus.is_empty());
        assert!(d.summary.contains("no NVIDIA driver"), "{}", d.summary);
    }
}
