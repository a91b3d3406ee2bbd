//! GPU telemetry as the domain sees it: readings, a bounded history, per-job
//! figures. Pure like the rest of the core: the clock is an argument.

use crate::Millis;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One reading of one GPU. A field the card does not report is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuReading {
    pub index: u32,
    /// Epoch milliseconds.
    pub at: Millis,
    /// Percent of time a kernel ran over the driver's last sample period.
    pub util_percent: Option<f64>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    /// Energy the card has used since the driver loaded, in joules.
    pub energy_j: Option<f64>,
    /// Uncorrected ECC errors since the driver loaded (volatile count).
    pub ecc_uncorrected: Option<u64>,
    /// XID errors reported since the previous reading.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_xids: Vec<u64>,
    /// The most recent XID error ever seen on this GPU, 0 for none.
    #[serde(default)]
    pub last_xid: u64,
    /// The driver says the GPU fell off the bus.
    #[serde(default)]
    pub lost: bool,
}

impl GpuReading {
    /// Memory in use as a percentage of the total, when both are known.
    pub fn memory_percent(&self) -> Option<f64> {
        match (self.memory_used_mib, self.memory_total_mib) {
            (Some(used), Some(total)) if total > 0 => Some(used as f64 * 100.0 / total as f64),
            _ => None,
        }
    }
}

/// A process using a GPU, as the driver lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
    pub memory_mib: Option<u64>,
    /// The gpuq job the process belongs to (found through the process tree).
    pub job: Option<crate::JobId>,
}

/// A job's GPU figures, for one attempt or summed over all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobGpuUsage {
    /// GPUs held × wall time.
    pub gpu_seconds: f64,
    /// Average GPU utilisation over the sampled time.
    pub util_avg_percent: Option<f64>,
    pub util_peak_percent: Option<f64>,
    /// Peak GPU memory of the job's processes (of its GPUs when processes are not reported).
    pub memory_peak_mib: Option<u64>,
    pub energy_j: Option<f64>,
    /// GPU-seconds covered by telemetry: the weight of the average.
    #[serde(default)]
    pub sampled_gpu_seconds: f64,
}

impl JobGpuUsage {
    /// Folds in `seconds` of a job's time: the readings of its GPUs, the memory its
    /// processes used (if known), and the energy its GPUs used over the interval.
    pub fn observe(
        &mut self,
        seconds: f64,
        gpus: &[&GpuReading],
        process_memory_mib: Option<u64>,
        energy_j: Option<f64>,
    ) {
        let utils: Vec<f64> = gpus.iter().filter_map(|g| g.util_percent).collect();
        if !utils.is_empty() && seconds > 0.0 {
            let mean = utils.iter().sum::<f64>() / utils.len() as f64;
            let weight = seconds * utils.len() as f64;
            let before = self.util_avg_percent.unwrap_or(0.0) * self.sampled_gpu_seconds;
            self.sampled_gpu_seconds += weight;
            self.util_avg_percent = Some((before + mean * weight) / self.sampled_gpu_seconds);
            let peak = utils.iter().cloned().fold(f64::MIN, f64::max);
            self.util_peak_percent = Some(self.util_peak_percent.map_or(peak, |p| p.max(peak)));
        }
        let memory = process_memory_mib.or_else(|| {
            let used: Vec<u64> = gpus.iter().filter_map(|g| g.memory_used_mib).collect();
            (!used.is_empty()).then(|| used.iter().sum())
        });
        if let Some(m) = memory {
            self.memory_peak_mib = Some(self.memory_peak_mib.map_or(m, |p| p.max(m)));
        }
        if let Some(e) = energy_j {
            self.energy_j = Some(self.energy_j.unwrap_or(0.0) + e);
        }
    }

    /// Sums two records (attempts of one job, or jobs of one user).
    pub fn merge(&mut self, other: &JobGpuUsage) {
        self.gpu_seconds += other.gpu_seconds;
        let weight = self.sampled_gpu_seconds + other.sampled_gpu_seconds;
        if weight > 0.0 {
            let sum = self.util_avg_percent.unwrap_or(0.0) * self.sampled_gpu_seconds
                + other.util_avg_percent.unwrap_or(0.0) * other.sampled_gpu_seconds;
            self.util_avg_percent = Some(sum / weight);
        }
        self.sampled_gpu_seconds = weight;
        self.util_peak_percent = max_opt(self.util_peak_percent, other.util_peak_percent);
        self.memory_peak_mib = max_opt(self.memory_peak_mib, other.memory_peak_mib);
        self.energy_j = match (self.energy_j, other.energy_j) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
}

fn max_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// One point of a GPU's history; older points are one-minute summaries
/// (mean utilisation and power, peak memory and temperature).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryPoint {
    pub at: Millis,
    pub util_percent: Option<f64>,
    pub memory_used_mib: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
}

impl HistoryPoint {
    pub fn of(r: &GpuReading) -> Self {
        Self {
            at: r.at,
            util_percent: r.util_percent,
            memory_used_mib: r.memory_used_mib,
            temperature_c: r.temperature_c,
            power_w: r.power_w,
        }
    }
}

/// How much history to keep: `recent` at full rate, then one point per `bucket` up to `keep`.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub recent_ms: Millis,
    pub bucket_ms: Millis,
    pub keep_ms: Millis,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            recent_ms: 15 * 60_000,
            bucket_ms: 60_000,
            keep_ms: 24 * 3_600_000,
        }
    }
}

/// One GPU's history in bounded space: at most `recent_ms / interval` full-rate
/// points plus `keep_ms / bucket_ms` summaries, however long the daemon runs.
#[derive(Debug, Clone)]
pub struct History {
    retention: Retention,
    recent: VecDeque<HistoryPoint>,
    older: VecDeque<HistoryPoint>,
    /// The summary being built: its bucket start and the points folded so far.
    bucket: Option<(Millis, Vec<HistoryPoint>)>,
}

impl History {
    pub fn new(retention: Retention) -> Self {
        Self {
            retention,
            recent: VecDeque::new(),
            older: VecDeque::new(),
            bucket: None,
        }
    }

    pub fn push(&mut self, point: HistoryPoint) {
        self.recent.push_back(point);
        let cutoff = point.at - self.retention.recent_ms;
        while self.recent.front().is_some_and(|p| p.at < cutoff) {
            let old = self.recent.pop_front().expect("front exists");
            self.fold(old);
        }
        let keep_from = point.at - self.retention.keep_ms;
        while self.older.front().is_some_and(|p| p.at < keep_from) {
            self.older.pop_front();
        }
    }

    fn fold(&mut self, p: HistoryPoint) {
        let start = p.at - p.at.rem_euclid(self.retention.bucket_ms.max(1));
        match &mut self.bucket {
            Some((s, points)) if *s == start => points.push(p),
            _ => {
                if let Some((s, points)) = self.bucket.take() {
                    self.older.push_back(summarise(s, &points));
                }
                self.bucket = Some((start, vec![p]));
            }
        }
    }

    /// Points at or after `since`, oldest first.
    pub fn since(&self, since: Millis) -> Vec<HistoryPoint> {
        let partial = self.bucket.as_ref().map(|(s, pts)| summarise(*s, pts));
        self.older
            .iter()
            .copied()
            .chain(partial)
            .chain(self.recent.iter().copied())
            .filter(|p| p.at >= since)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.recent.len() + self.older.len() + self.bucket.as_ref().map_or(0, |b| b.1.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// At most `max` points for a chart: consecutive points summarised in equal
/// runs (as the one-minute summaries are: mean utilisation and power, peak
/// memory and temperature), each at its first point's time.
pub fn downsample(points: &[HistoryPoint], max: usize) -> Vec<HistoryPoint> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let run = points.len().div_ceil(max);
    points.chunks(run).map(|c| summarise(c[0].at, c)).collect()
}

fn summarise(start: Millis, points: &[HistoryPoint]) -> HistoryPoint {
    let mean = |f: fn(&HistoryPoint) -> Option<f64>| {
        let v: Vec<f64> = points.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    HistoryPoint {
        at: start,
        util_percent: mean(|p| p.util_percent),
        power_w: mean(|p| p.power_w),
        memory_used_mib: points.iter().filter_map(|p| p.memory_used_mib).max(),
        temperature_c: points.iter().filter_map(|p| p.temperature_c).max(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_the_shape_and_the_peaks() {
        let points: Vec<HistoryPoint> = (0..1000)
            .map(|i| point(i * 1000, (i % 10) as f64 * 10.0))
            .collect();
        let small = downsample(&points, 100);
        assert!(small.len() <= 100 && small.len() >= 50, "{}", small.len());
        assert_eq!(small[0].at, 0);
        // Means over whole periods of the 0..90 saw: 45 everywhere.
        assert!(small
            .iter()
            .all(|p| (p.util_percent.unwrap() - 45.0).abs() < 1e-9));
        let peak = points.iter().filter_map(|p| p.memory_used_mib).max();
        assert_eq!(small.iter().filter_map(|p| p.memory_used_mib).max(), peak);
        assert_eq!(downsample(&points[..10], 100).len(), 10);
    }

    fn point(at: Millis, util: f64) -> HistoryPoint {
        HistoryPoint {
            at,
            util_percent: Some(util),
            memory_used_mib: Some(at as u64 % 1000),
            temperature_c: Some(60),
            power_w: Some(100.0),
        }
    }

    #[test]
    fn history_stays_bounded_and_summarises_old_points() {
        let retention = Retention {
            recent_ms: 60_000,
            bucket_ms: 10_000,
            keep_ms: 600_000,
        };
        let mut h = History::new(retention);
        // A day at one reading per second.
        for s in 0..86_400 {
            h.push(point(s * 1000, (s % 100) as f64));
        }
        // 60 recent + 60 summaries + one bucket being filled.
        assert!(h.len() <= 61 + 60 + 10, "{}", h.len());
        let all = h.since(0);
        assert!(all.windows(2).all(|w| w[0].at <= w[1].at), "oldest first");
        // The oldest summary is the first whole bucket inside the kept ten minutes.
        assert_eq!(all.first().unwrap().at, 85_800_000);
        let summary = all[0];
        // A 10 s bucket of utilisations s % 100 averages to its middle value.
        assert!(summary.util_percent.unwrap() > 0.0);
        assert_eq!(h.since(86_399_000).len(), 1);
    }

    #[test]
    fn usage_averages_over_gpu_time_and_sums_attempts() {
        let busy = GpuReading {
            util_percent: Some(90.0),
            memory_used_mib: Some(1000),
            ..Default::default()
        };
        let idle = GpuReading {
            util_percent: Some(10.0),
            memory_used_mib: Some(3000),
            ..Default::default()
        };
        let mut a = JobGpuUsage::default();
        a.observe(10.0, &[&busy, &idle], None, Some(5.0));
        assert_eq!(a.util_avg_percent, Some(50.0));
        assert_eq!(a.util_peak_percent, Some(90.0));
        assert_eq!(a.memory_peak_mib, Some(4000));
        let mut b = JobGpuUsage::default();
        b.observe(20.0, &[&idle], Some(2500), None);
        assert_eq!(b.memory_peak_mib, Some(2500), "process memory wins");
        a.merge(&b);
        // 20 GPU-s at 50% and 20 GPU-s at 10%.
        assert_eq!(a.util_avg_percent, Some(30.0));
        assert_eq!(a.energy_j, Some(5.0));
        assert_eq!(a.memory_peak_mib, Some(4000));
    }
}
