//! GPU discovery: NVML (loaded at run time, so no driver is needed to build or
//! run gpuq), simulated devices, or none.

use serde::Serialize;
use std::str::FromStr;

/// One GPU as the scheduler and `gpuq gpus` see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// Index in nvidia-smi (PCI bus) order: the value put in CUDA_VISIBLE_DEVICES.
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
}

/// Where the GPUs come from: `--gpus auto|none|sim:N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSource {
    Auto,
    None,
    Simulated(u32),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--gpus {0:?} is not understood; use auto, none or sim:N (N simulated GPUs, e.g. sim:4)")]
pub struct GpuSourceError(String);

impl FromStr for GpuSource {
    type Err = GpuSourceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(GpuSource::Auto),
            "none" => Ok(GpuSource::None),
            _ => s
                .strip_prefix("sim:")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|&n| n <= 1024)
                .map(GpuSource::Simulated)
                .ok_or_else(|| GpuSourceError(s.to_string())),
        }
    }
}

/// The result of discovery, with a line for the daemon log saying what was found.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub gpus: Vec<GpuInfo>,
    pub summary: String,
}

pub fn discover(source: &GpuSource) -> Discovery {
    match source {
        GpuSource::None => Discovery { gpus: vec![], summary: "GPUs disabled (--gpus none)".into() },
        GpuSource::Simulated(n) => Discovery {
            gpus: simulated(*n),
            summary: format!("{n} simulated GPUs (--gpus sim:{n}); jobs run for real, the devices are pretend"),
        },
        GpuSource::Auto => match nvml::discover() {
            Ok(gpus) => {
                let summary = format!("NVML: {} GPU(s) found", gpus.len());
                Discovery { gpus, summary }
            }
            Err(why) => Discovery {
                gpus: vec![],
                summary: format!("no NVIDIA driver found ({why}); running without GPUs (CPU-only jobs still run)"),
            },
        },
    }
}

fn simulated(n: u32) -> Vec<GpuInfo> {
    (0..n)
        .map(|i| GpuInfo {
            index: i,
            uuid: format!("GPU-5157{i:04x}-0000-4000-8000-000000000000"),
            model: "Simulated GPU 80GB".into(),
            memory_mib: 81_920,
        })
        .collect()
}

mod nvml {
    use super::GpuInfo;
    use nvml_wrapper::Nvml;

    /// Initialises NVML (dlopen of libnvidia-ml.so.1) and lists the devices.
    pub fn discover() -> Result<Vec<GpuInfo>, String> {
        let nvml = Nvml::init().map_err(|e| e.to_string())?;
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
            });
        }
        Ok(gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_gpu_flag() {
        assert_eq!("auto".parse(), Ok(GpuSource::Auto));
        assert_eq!("none".parse(), Ok(GpuSource::None));
        assert_eq!("sim:4".parse(), Ok(GpuSource::Simulated(4)));
        for bad in ["", "sim:", "sim:x", "sim:-1", "4", "sim:99999"] {
            assert!(bad
                .parse::<GpuSource>()
                .unwrap_err()
                .to_string()
                .contains("sim:N"));
        }
    }

    #[test]
    fn simulated_gpus_have_distinct_indices_and_uuids() {
        let d = discover(&GpuSource::Simulated(3));
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
