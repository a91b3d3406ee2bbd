//! Telemetry sources: NVML (the library loaded at run time) or simulated GPUs.
//!
//! A source is created and used on one thread (the daemon's sampler thread):
//! NVML's event set borrows the library handle, and nothing here needs to move.

use crate::{GpuInfo, GpuSource};
use gpuq_core::telemetry::{GpuProcess, GpuReading};
use gpuq_core::Millis;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::Nvml;

/// What a simulated GPU is asked to look like by the job holding it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimLoad {
    pub util_percent: f64,
    /// `None`: 60% of the card's memory.
    pub memory_mib: Option<u64>,
}

/// One round of readings: every GPU, and the processes the driver lists.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub readings: Vec<GpuReading>,
    pub processes: Vec<GpuProcess>,
}

pub enum Telemetry {
    None,
    Simulated(Simulated),
    Nvml(NvmlTelemetry),
}

impl Telemetry {
    /// Opens the source matching discovery. NVML failing here (it worked at
    /// discovery) degrades to no telemetry with the reason, never an error.
    pub fn open(source: &GpuSource, gpus: &[GpuInfo]) -> (Self, String) {
        match source {
            GpuSource::None => (Telemetry::None, "no GPUs".into()),
            GpuSource::Simulated(_) => (
                Telemetry::Simulated(Simulated::new(gpus)),
                "simulated readings".into(),
            ),
            GpuSource::Auto if gpus.is_empty() => (Telemetry::None, "no GPUs".into()),
            GpuSource::Auto => match crate::init_nvml() {
                Ok(nvml) => {
                    let t = NvmlTelemetry::new(nvml);
                    let what = if t.events.is_some() {
                        "NVML readings and XID events".into()
                    } else {
                        "NVML readings (no XID events on this driver)".into()
                    };
                    (Telemetry::Nvml(t), what)
                }
                Err(e) => (Telemetry::None, format!("NVML unavailable: {e}")),
            },
        }
    }

    /// Reads every GPU. `loads` (simulated GPUs only): per GPU index, what its job asks for.
    pub fn sample(&mut self, now: Millis, loads: &[(u32, SimLoad)]) -> Sample {
        match self {
            Telemetry::None => Sample::default(),
            Telemetry::Simulated(s) => s.sample(now, loads),
            Telemetry::Nvml(n) => n.sample(now),
        }
    }
}

/// Simulated GPUs: idle unless a job holds them, then as busy as the job says.
pub struct Simulated {
    gpus: Vec<GpuInfo>,
    energy_j: Vec<f64>,
    last: Option<Millis>,
}

impl Simulated {
    fn new(gpus: &[GpuInfo]) -> Self {
        Self {
            gpus: gpus.to_vec(),
            energy_j: vec![0.0; gpus.len()],
            last: None,
        }
    }

    fn sample(&mut self, now: Millis, loads: &[(u32, SimLoad)]) -> Sample {
        let dt = self.last.map_or(0.0, |l| (now - l).max(0) as f64 / 1000.0);
        self.last = Some(now);
        let readings = self
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let load = loads.iter().find(|(idx, _)| *idx == g.index).map(|l| l.1);
                let util = load.map_or(0.0, |l| l.util_percent.clamp(0.0, 100.0));
                let memory = match load {
                    Some(l) => l.memory_mib.unwrap_or(g.memory_mib * 6 / 10),
                    None => 0,
                }
                .min(g.memory_mib);
                // An 80 GB-class card: ~60 W idle, ~400 W flat out, warmer with load.
                let power = 60.0 + 3.4 * util;
                self.energy_j[i] += power * dt;
                GpuReading {
                    index: g.index,
                    at: now,
                    util_percent: Some(util),
                    memory_used_mib: Some(memory),
                    memory_total_mib: Some(g.memory_mib),
                    temperature_c: Some(32 + (util * 0.4) as u32),
                    power_w: Some(power),
                    sm_clock_mhz: Some(if load.is_some() { 1410 } else { 210 }),
                    energy_j: Some(self.energy_j[i]),
                    ecc_uncorrected: Some(0),
                    ..Default::default()
                }
            })
            .collect();
        Sample {
            readings,
            processes: vec![],
        }
    }
}

pub struct NvmlTelemetry {
    nvml: &'static Nvml,
    /// XID events; `None` when the driver does not support them.
    events: Option<EventSet<'static>>,
    last_xid: Vec<u64>,
}

impl NvmlTelemetry {
    fn new(nvml: Nvml) -> Self {
        // The daemon keeps NVML for its whole life; leaking the handle lets the
        // event set borrow it without a self-referential struct.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let count = nvml.device_count().unwrap_or(0);
        let mut events = nvml.create_event_set().ok();
        for i in 0..count {
            let (Some(set), Ok(dev)) = (events.take(), nvml.device_by_index(i)) else {
                break;
            };
            events = dev
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .ok();
        }
        Self {
            nvml,
            events,
            last_xid: vec![0; count as usize],
        }
    }

    fn sample(&mut self, now: Millis) -> Sample {
        let count = self.nvml.device_count().unwrap_or(0);
        self.last_xid.resize(count as usize, 0);
        let mut new_xids: Vec<Vec<u64>> = vec![vec![]; count as usize];
        if let Some(set) = &self.events {
            // Drain what arrived since the last round without waiting.
            while let Ok(event) = set.wait(0) {
                let index = event.device.index().unwrap_or(u32::MAX) as usize;
                if let (Some(list), Some(XidError::Value(x))) =
                    (new_xids.get_mut(index), event.event_data)
                {
                    list.push(x);
                }
            }
        }
        let mut sample = Sample::default();
        for i in 0..count {
            let mut r = GpuReading {
                index: i,
                at: now,
                new_xids: std::mem::take(&mut new_xids[i as usize]),
                ..Default::default()
            };
            if let Some(x) = r.new_xids.last() {
                self.last_xid[i as usize] = *x;
            }
            r.last_xid = self.last_xid[i as usize];
            let dev = match self.nvml.device_by_index(i) {
                Ok(d) => d,
                Err(e) => {
                    r.lost = matches!(e, NvmlError::GpuLost);
                    sample.readings.push(r);
                    continue;
                }
            };
            match dev.utilization_rates() {
                Ok(u) => r.util_percent = Some(u.gpu as f64),
                Err(NvmlError::GpuLost) => r.lost = true,
                Err(_) => {}
            }
            if let Ok(m) = dev.memory_info() {
                r.memory_used_mib = Some(m.used / MIB);
                r.memory_total_mib = Some(m.total / MIB);
            }
            r.temperature_c = dev.temperature(TemperatureSensor::Gpu).ok();
            r.power_w = dev.power_usage().ok().map(|mw| mw as f64 / 1000.0);
            r.sm_clock_mhz = dev.clock_info(Clock::SM).ok();
            r.energy_j = dev
                .total_energy_consumption()
                .ok()
                .map(|mj| mj as f64 / 1000.0);
            r.ecc_uncorrected = dev
                .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                .ok();
            if let Ok(procs) = dev.running_compute_processes() {
                sample
                    .processes
                    .extend(procs.into_iter().map(|p| GpuProcess {
                        gpu: i,
                        pid: p.pid,
                        memory_mib: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b / MIB),
                            UsedGpuMemory::Unavailable => None,
                        },
                        job: None,
                    }));
            }
            sample.readings.push(r);
        }
        sample
    }
}

const MIB: u64 = 1024 * 1024;
