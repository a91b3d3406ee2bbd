//! Right-sizing: from what a job used (telemetry) and the catalog, the cheaper
//! GPUs that would fit it, and the hints its figures call for; from what its
//! cgroup counted, the memory and cores to ask for (`host_hints`).

use crate::catalog::{Catalog, GpuModel};
use crate::cost::Micros;
use crate::telemetry::JobGpuUsage;
use crate::JobId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Memory head-room asked of a smaller card: the peak plus a fifth.
const MEMORY_MARGIN: f64 = 1.2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Advice {
    pub job: JobId,
    /// The figures the advice is based on, in words.
    pub basis: String,
    /// Cards that fit, cheapest estimated cost first.
    pub options: Vec<AdviceOption>,
    /// Hints, each with the figure that triggered it.
    pub hints: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdviceOption {
    pub gpu_model: String,
    pub memory_gib: u32,
    /// Cheapest on-demand price of one such GPU for an hour in the catalog.
    pub gpu_hour: Micros,
    /// Where that price is offered (provider/region/instance).
    pub offer: String,
    /// Estimated run time relative to the job's own (1.0 = same).
    pub time_factor: f64,
    /// Estimated cost of the same run on this card.
    pub estimated_cost: Micros,
    /// Relative to what the job cost, when it had a price.
    pub cost_factor: Option<f64>,
}

pub struct AdviceInput<'a> {
    pub job: JobId,
    pub gpus: u32,
    /// The card the job ran on, when the catalog knows it.
    pub model: Option<&'a GpuModel>,
    pub card_memory_mib: u64,
    pub usage: Option<&'a JobGpuUsage>,
    /// Wall time of all its attempts.
    pub runtime_ms: i64,
    pub cost: Option<Micros>,
    pub catalog: &'a Catalog,
    /// Memory and CPU as its cgroup counted them, when it ran confined.
    pub host: Option<&'a HostFigures>,
}

pub fn advise(i: &AdviceInput) -> Advice {
    let gpus = i.gpus.max(1) as f64;
    // Memory alone (a job sampled once) is enough for the cards that fit it.
    let sampled = i
        .usage
        .filter(|u| u.sampled_gpu_seconds > 0.0 || u.memory_peak_mib.is_some());
    let host = i.host.map(host_hints).unwrap_or_default();
    let Some(u) = sampled else {
        return Advice {
            job: i.job,
            basis: "no GPU telemetry for this job (it ran without GPUs, or before it was sampled)"
                .into(),
            options: vec![],
            hints: host,
        };
    };
    let utilisation = u.util_avg_percent.zip(u.util_peak_percent);
    let busy_share = utilisation.map_or(1.0, |(avg, _)| (avg / 100.0).clamp(0.0, 1.0));
    let peak_gib_per_gpu = u.memory_peak_mib.map(|m| m as f64 / 1024.0 / gpus);
    let card_gib = i.card_memory_mib as f64 / 1024.0;
    let hours = i.runtime_ms.max(0) as f64 / 3_600_000.0;
    let basis = format!(
        "{}{} for {:.2} h: {}; peak memory {} per GPU{}",
        crate::plural(i.gpus.into(), "GPU"),
        i.model
            .map(|m| format!(" ({})", m.model))
            .unwrap_or_default(),
        hours,
        utilisation.map_or("utilisation not sampled".into(), |(avg, peak)| format!(
            "utilisation {avg:.0}% average, {peak:.0}% peak"
        )),
        peak_gib_per_gpu.map_or("unknown".into(), |g| format!("{g:.1} GiB")),
        i.cost.map(|c| format!("; cost {c}")).unwrap_or_default()
    );
    let mut hints = Vec::new();
    let idle = utilisation.is_some_and(|(_, peak)| peak < 1.0);
    if let Some((_, peak_util)) = utilisation.filter(|_| idle) {
        hints.push(format!(
            "the job never used its GPU (peak utilisation {peak_util:.0}%): is it running on the CPU? Check \
             torch.cuda.is_available() and that the model and batches are moved .to(\"cuda\"); submit without \
             --gpus if it needs none"
        ));
    } else if let Some((util, peak_util)) = utilisation.filter(|(avg, _)| *avg < 70.0) {
        hints.push(format!(
            "utilisation averaged {util:.0}% (peak {peak_util:.0}%): likely input-bound: raise DataLoader \
             num_workers, set pin_memory=True and persistent_workers=True, prefetch, or move preprocessing to the GPU"
        ));
    }
    if let Some(peak) = peak_gib_per_gpu.filter(|_| card_gib > 0.0) {
        let share = peak / card_gib * 100.0;
        if share > 90.0 {
            hints.push(format!(
                "peak memory {peak:.1} of {card_gib:.0} GiB ({share:.0}%): close to out-of-memory: use AMP (bf16), \
                 gradient checkpointing, or a smaller batch with gradient accumulation"
            ));
        } else if share < 30.0 && !idle {
            hints.push(format!(
                "peak memory {peak:.1} of {card_gib:.0} GiB ({share:.0}%): a smaller, cheaper card fits (see the options)"
            ));
        }
    }
    let mut options = Vec::new();
    if let Some(peak) = peak_gib_per_gpu {
        let need = peak * MEMORY_MARGIN;
        for m in i
            .catalog
            .gpus
            .iter()
            .filter(|m| m.memory_gib as f64 >= need)
        {
            let Some((price, offer)) = i.catalog.cheapest(&m.model) else {
                continue;
            };
            // The compute-bound share of the run (its utilisation; all of it when
            // not sampled) scales with speed; the rest (input, host work) does not.
            // Unknown current card: same speed.
            let share = busy_share;
            let speedup = i.model.map_or(1.0, |cur| cur.tflops / m.tflops);
            let time_factor = (1.0 - share) + share * speedup;
            let estimated_ms = (i.runtime_ms.max(0) as f64 * time_factor) as i64;
            let estimated_cost = crate::cost::cumulative(
                Micros(price.0.saturating_mul(i.gpus.max(1) as i64)),
                estimated_ms,
            );
            options.push(AdviceOption {
                gpu_model: m.model.clone(),
                memory_gib: m.memory_gib,
                gpu_hour: price,
                offer: offer.key(),
                time_factor,
                estimated_cost,
                cost_factor: i
                    .cost
                    .filter(|c| c.0 > 0)
                    .map(|c| estimated_cost.0 as f64 / c.0 as f64),
            });
        }
        options.sort_by_key(|o| o.estimated_cost);
        options.truncate(5);
    }
    hints.extend(host);
    Advice {
        job: i.job,
        basis,
        options,
        hints,
    }
}

/// A job's memory and CPU over its confined attempts, for `host_hints`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFigures {
    /// Its memory limit (what it asked for, or was given), bytes.
    pub memory_limit_bytes: Option<u64>,
    /// The highest peak of its attempts, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Cores it was given; `None`: none reserved.
    pub cpus: Option<u32>,
    /// CPU time of the attempts that counted it, seconds.
    pub cpu_seconds: Option<f64>,
    /// Wall time of those same attempts, seconds.
    pub wall_seconds: f64,
    /// An attempt was killed at its memory limit.
    pub oom_killed: bool,
    /// The spec gave the memory (else the daemon's default share did).
    pub memory_asked: bool,
    /// The spec gave the cores.
    pub cpus_asked: bool,
}

impl HostFigures {
    /// The figures of a job's attempts: the highest peak, CPU and wall time
    /// summed over the attempts that counted CPU (a running one is left out:
    /// its CPU time is not known yet), the latest limit and cores.
    pub fn of_attempts(attempts: &[crate::Attempt], spec: &crate::JobSpec) -> Option<HostFigures> {
        let mut f = HostFigures {
            memory_asked: spec.memory.is_some(),
            cpus_asked: spec.cpus.is_some(),
            ..HostFigures::default()
        };
        let mut any = false;
        for a in attempts {
            let Some(h) = &a.host_usage else { continue };
            any = true;
            f.oom_killed |= h.oom_killed;
            f.memory_peak_bytes = f.memory_peak_bytes.max(h.memory_peak_bytes);
            f.memory_limit_bytes = h.memory_limit_bytes.or(f.memory_limit_bytes);
            f.cpus = h.cpus.or(f.cpus);
            if let (Some(cpu), Some(end)) = (h.cpu_seconds, a.ended_at) {
                f.cpu_seconds = Some(f.cpu_seconds.unwrap_or(0.0) + cpu);
                f.wall_seconds += (end - a.started_at).max(0) as f64 / 1000.0;
            }
        }
        any.then_some(f)
    }

    /// Cores busy on average (CPU time over wall time), when both are known.
    pub fn cores_used(&self) -> Option<f64> {
        let cpu = self.cpu_seconds?;
        (self.wall_seconds > 0.0).then(|| cpu / self.wall_seconds)
    }
}

/// Memory asked of a job beyond its peak: a quarter more (allocators and
/// data vary from run to run; a limit at the peak invites an OOM kill).
const HOST_MEMORY_MARGIN: f64 = 1.25;
/// Cores asked beyond the average use: half as many more (bursts, workers).
const CPU_MARGIN: f64 = 1.5;
/// Less wall time than this says too little about a job's average use of cores.
const CPU_MIN_WALL_SECONDS: f64 = 60.0;

/// The memory and cores a job should ask for, from what its cgroup counted.
/// Each hint names the figures it is based on and the flag to use; nothing is
/// said where the figures are unknown, or the request already fits.
pub fn host_hints(f: &HostFigures) -> Vec<String> {
    let mut hints = Vec::new();
    let how = |asked: bool| if asked { "asked" } else { "given" };
    let limit = f.memory_limit_bytes.filter(|l| *l > 0);
    match (limit, f.memory_peak_bytes) {
        (Some(limit), _) if f.oom_killed => {
            let more = memory_to_ask(limit as f64 * 1.5);
            hints.push(format!(
                "ran out of memory at its limit of {}: ask for more with --mem (e.g. --mem {})",
                bytes_text(limit),
                mem_flag(more)
            ));
        }
        (Some(limit), Some(peak)) => {
            let ask = memory_to_ask(peak as f64 * HOST_MEMORY_MARGIN);
            // Only a request that frees a quarter of the limit is worth a change.
            if (ask as f64) <= limit as f64 * 0.75 {
                hints.push(format!(
                    "{} {}, peaked at {}: ask for {} (--mem {})",
                    how(f.memory_asked),
                    bytes_text(limit),
                    bytes_text(peak),
                    bytes_text(ask),
                    mem_flag(ask)
                ));
            } else if peak as f64 >= limit as f64 * 0.9 && ask > limit {
                hints.push(format!(
                    "{} {}, peaked at {} ({:.0}%): close to its limit, an OOM kill away: ask for {} (--mem {})",
                    how(f.memory_asked),
                    bytes_text(limit),
                    bytes_text(peak),
                    peak as f64 / limit as f64 * 100.0,
                    bytes_text(ask),
                    mem_flag(ask)
                ));
            }
        }
        _ => {}
    }
    let used = f
        .cores_used()
        .filter(|_| f.wall_seconds >= CPU_MIN_WALL_SECONDS);
    if let (Some(cpus), Some(used)) = (f.cpus.filter(|c| *c > 0), used) {
        let ask = ((used * CPU_MARGIN).ceil() as u32).max(1);
        if ask < cpus && used < cpus as f64 * 0.5 {
            hints.push(format!(
                "{} {}, used {used:.1} on average: ask for {ask} (--cpus {ask})",
                how(f.cpus_asked),
                crate::plural(cpus.into(), "core")
            ));
        } else if used >= cpus as f64 * 0.9 {
            hints.push(format!(
                "{} {}, used {used:.1} on average: it is bound by its cores; more (--cpus {}) may make it faster",
                how(f.cpus_asked),
                crate::plural(cpus.into(), "core"),
                cpus * 2
            ));
        }
    }
    hints
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `bytes` rounded up to a size people write: 256 MiB steps under 1 GiB,
/// whole GiB under 8, 4 GiB steps under 32, 8 under 128, 32 above.
pub fn memory_to_ask(bytes: f64) -> u64 {
    let b = bytes.max(1.0);
    let step = match b {
        b if b < GIB as f64 => 256 * MIB,
        b if b < 8.0 * GIB as f64 => GIB,
        b if b < 32.0 * GIB as f64 => 4 * GIB,
        b if b < 128.0 * GIB as f64 => 8 * GIB,
        _ => 32 * GIB,
    };
    ((b / step as f64).ceil() as u64).saturating_mul(step)
}

/// `--mem`'s form of a size: `12G`, `768M`.
pub fn mem_flag(bytes: u64) -> String {
    crate::MemSize::from_mib(bytes.div_ceil(MIB)).to_string()
}

/// A memory amount for people: "64 GiB", "9.1 GiB", "768 MiB", "12 KiB".
pub fn bytes_text(bytes: u64) -> String {
    let (unit, name) = match bytes {
        b if b >= GIB => (GIB, "GiB"),
        b if b >= MIB => (MIB, "MiB"),
        b if b >= 1024 => (1024, "KiB"),
        b => return format!("{b} bytes"),
    };
    let value = bytes as f64 / unit as f64;
    let text = format!("{value:.1}");
    match text.strip_suffix(".0") {
        Some(whole) => format!("{whole} {name}"),
        None => format!("{text} {name}"),
    }
}

/// CPU time for people: "45 core-seconds", "12 core-minutes", "3.2 core-hours".
pub fn cpu_time_text(seconds: f64) -> String {
    match seconds {
        // A short job's fraction of a second is worth a digit.
        s if s < 10.0 => format!("{s:.1} core-seconds"),
        s if s < 60.0 => format!("{s:.0} core-seconds"),
        s if s < 3600.0 => format!("{:.0} core-minutes", s / 60.0),
        s => format!("{:.1} core-hours", s / 3600.0),
    }
}

/// An attempt's memory in words: "asked 64 GiB, peaked at 9.1 GiB" (`asked`:
/// the spec gave the size; else "given", the daemon's default), with "out of
/// memory at its limit" after an OOM kill; `None` when nothing was counted.
pub fn memory_words(h: &crate::job::HostUsage, asked: bool) -> Option<String> {
    let peak = h
        .memory_peak_bytes
        .map(|p| format!("peaked at {}", bytes_text(p)));
    let limit = h.memory_limit_bytes.map(|l| {
        format!(
            "{} {}",
            if asked { "asked" } else { "given" },
            bytes_text(l)
        )
    });
    let mut text = match (limit, peak) {
        (Some(l), Some(p)) => format!("{l}, {p}"),
        (Some(l), None) => format!("{l}, peak not counted"),
        (None, Some(p)) => format!("{p} (no limit of its own)"),
        (None, None) if h.oom_killed => {
            return Some("out of memory at its limit (no figures counted)".into())
        }
        (None, None) => return None,
    };
    if h.oom_killed {
        text.push_str(": out of memory at its limit");
    }
    Some(text)
}

/// An attempt's CPU in words: "8 cores, 3.2 core-hours (2.1 busy on
/// average)"; the average only where the wall time is known.
pub fn cpu_words(h: &crate::job::HostUsage, wall_seconds: Option<f64>) -> Option<String> {
    let cpu = h.cpu_seconds?;
    let cores = match h.cpus {
        Some(n) if n > 0 => crate::plural(n.into(), "core"),
        _ => "no reserved cores".to_string(),
    };
    let average = wall_seconds
        .filter(|w| *w > 0.0)
        .map(|w| format!(" ({:.1} busy on average)", cpu / w))
        .unwrap_or_default();
    Some(format!("{cores}, {}{average}", cpu_time_text(cpu)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(util: f64, peak_util: f64, mem_mib: u64) -> JobGpuUsage {
        JobGpuUsage {
            gpu_seconds: 3600.0,
            util_avg_percent: Some(util),
            util_peak_percent: Some(peak_util),
            memory_peak_mib: Some(mem_mib),
            energy_j: None,
            sampled_gpu_seconds: 3600.0,
        }
    }

    fn advise_on(card: &str, u: &JobGpuUsage) -> Advice {
        let c = Catalog::builtin();
        let model = c.gpu(card).cloned();
        advise(&AdviceInput {
            job: 1,
            gpus: 1,
            card_memory_mib: model.as_ref().map_or(81920, |m| m.memory_gib as u64 * 1024),
            model: model.as_ref(),
            usage: Some(u),
            runtime_ms: 3_600_000,
            cost: Some(Micros(4_000_000)),
            catalog: &c,
            host: None,
        })
    }

    #[test]
    fn a_small_job_on_a_big_card_gets_smaller_cards_and_the_figure() {
        let a = advise_on("A100-80GB", &usage(95.0, 100.0, 9 * 1024));
        assert!(!a.options.is_empty());
        assert!(
            a.options
                .iter()
                .all(|o| o.memory_gib as f64 >= 9.0 * MEMORY_MARGIN),
            "{:?}",
            a.options
        );
        assert!(a
            .options
            .windows(2)
            .all(|w| w[0].estimated_cost <= w[1].estimated_cost));
        assert!(
            a.hints
                .iter()
                .any(|h| h.contains("peak memory 9.0 of 80 GiB")),
            "{:?}",
            a.hints
        );
    }

    #[test]
    fn hints_name_the_figure_that_triggered_them() {
        let idle = advise_on("A100-80GB", &usage(0.0, 0.0, 500));
        assert!(
            idle.hints[0].contains("never used its GPU (peak utilisation 0%)"),
            "{:?}",
            idle.hints
        );
        let starved = advise_on("A100-80GB", &usage(43.0, 90.0, 40 * 1024));
        assert!(
            starved.hints[0].contains("averaged 43%") && starved.hints[0].contains("num_workers")
        );
        let full = advise_on("A100-80GB", &usage(97.0, 100.0, 78 * 1024));
        assert!(
            full.hints
                .iter()
                .any(|h| h.contains("(98%)") && h.contains("gradient checkpointing")),
            "{:?}",
            full.hints
        );
        assert!(full.options.iter().all(|o| o.memory_gib >= 80));
    }

    #[test]
    fn memory_alone_is_enough_for_the_cards_that_fit() {
        let once = JobGpuUsage {
            gpu_seconds: 4.0,
            memory_peak_mib: Some(9 * 1024),
            ..Default::default()
        };
        let a = advise_on("A100-80GB", &once);
        assert!(a.basis.contains("utilisation not sampled"), "{}", a.basis);
        assert!(a.basis.starts_with("1 GPU (A100"), "{}", a.basis);
        assert!(!a.options.is_empty());
        assert!(
            a.hints.iter().all(|h| !h.contains("utilisation")),
            "{:?}",
            a.hints
        );
    }

    #[test]
    fn no_telemetry_no_guessing() {
        let c = Catalog::builtin();
        let a = advise(&AdviceInput {
            job: 3,
            gpus: 1,
            model: None,
            card_memory_mib: 0,
            usage: None,
            runtime_ms: 1000,
            cost: None,
            catalog: &c,
            host: None,
        });
        assert!(a.options.is_empty() && a.hints.is_empty());
        assert!(a.basis.contains("no GPU telemetry"));
    }

    const G: u64 = 1 << 30;

    fn host(limit_gib: u64, peak: u64, cpus: u32, cpu_seconds: f64, wall: f64) -> HostFigures {
        HostFigures {
            memory_limit_bytes: Some(limit_gib * G),
            memory_peak_bytes: Some(peak),
            cpus: Some(cpus),
            cpu_seconds: Some(cpu_seconds),
            wall_seconds: wall,
            oom_killed: false,
            memory_asked: true,
            cpus_asked: true,
        }
    }

    #[test]
    fn an_oversized_memory_request_gets_the_peak_plus_a_margin_in_a_round_unit() {
        let h = host_hints(&host(64, 9 * G, 0, 0.0, 0.0));
        assert_eq!(
            h,
            ["asked 64 GiB, peaked at 9 GiB: ask for 12 GiB (--mem 12G)"]
        );
        let h = host_hints(&host(64, 9 * G + G / 10, 0, 0.0, 0.0));
        assert_eq!(
            h,
            ["asked 64 GiB, peaked at 9.1 GiB: ask for 12 GiB (--mem 12G)"]
        );
        // Small jobs get MiB steps; a request that already fits gets nothing.
        let h = host_hints(&host(4, 300 << 20, 0, 0.0, 0.0));
        assert_eq!(
            h,
            ["asked 4 GiB, peaked at 300 MiB: ask for 512 MiB (--mem 512M)"]
        );
        assert!(host_hints(&host(12, 9 * G, 0, 0.0, 0.0)).is_empty());
        // A default share is said to be given, not asked for.
        let given = HostFigures {
            memory_asked: false,
            ..host(64, 9 * G, 0, 0.0, 0.0)
        };
        assert_eq!(
            host_hints(&given),
            ["given 64 GiB, peaked at 9 GiB: ask for 12 GiB (--mem 12G)"]
        );
    }

    #[test]
    fn memory_near_its_limit_or_killed_at_it_asks_for_more() {
        let h = host_hints(&host(16, 15 * G, 0, 0.0, 0.0));
        assert_eq!(
            h,
            ["asked 16 GiB, peaked at 15 GiB (94%): close to its limit, an OOM kill away: ask for 20 GiB (--mem 20G)"]
        );
        let killed = HostFigures {
            oom_killed: true,
            ..host(64, 64 * G, 0, 0.0, 0.0)
        };
        assert_eq!(
            host_hints(&killed),
            ["ran out of memory at its limit of 64 GiB: ask for more with --mem (e.g. --mem 96G)"]
        );
    }

    #[test]
    fn cores_are_sized_from_the_average_use_when_the_run_was_long_enough() {
        // 2.1 cores busy on average over an hour of 16 given.
        let h = host_hints(&host(64, 50 * G, 16, 2.1 * 3600.0, 3600.0));
        assert_eq!(
            h,
            ["asked 16 cores, used 2.1 on average: ask for 4 (--cpus 4)"]
        );
        // A ten-second run says nothing about its average.
        assert!(host_hints(&host(64, 50 * G, 16, 21.0, 10.0)).is_empty());
        // All cores busy: bound by them.
        let h = host_hints(&host(64, 50 * G, 8, 7.9 * 600.0, 600.0));
        assert!(
            h[0].starts_with("asked 8 cores, used 7.9 on average: it is bound by its cores"),
            "{h:?}"
        );
        // No cores reserved: nothing to size.
        assert!(host_hints(&host(64, 50 * G, 0, 7.9 * 600.0, 600.0)).is_empty());
    }

    #[test]
    fn figures_of_attempts_take_the_highest_peak_and_sum_cpu_over_ended_ones() {
        let attempt = |n: u32, start: i64, end: Option<i64>, peak: u64, cpu: f64| crate::Attempt {
            job_id: 1,
            attempt: n,
            node: "n".into(),
            gpus: vec![],
            started_at: start,
            ended_at: end,
            exit_code: None,
            signal: None,
            reason: None,
            gpu_usage: None,
            rate_per_hour: None,
            slurm_job_id: None,
            host_usage: Some(crate::job::HostUsage {
                oom_killed: n == 1,
                memory_peak_bytes: Some(peak),
                memory_limit_bytes: Some(16 * G),
                cpu_seconds: Some(cpu),
                cpus: Some(4),
            }),
        };
        let spec = crate::JobSpec {
            memory: Some(crate::MemSize::from_mib(16 * 1024)),
            ..Default::default()
        };
        let f = HostFigures::of_attempts(
            &[
                attempt(1, 0, Some(100_000), 16 * G, 50.0),
                attempt(2, 200_000, Some(500_000), 3 * G, 300.0),
                attempt(3, 600_000, None, 20 * G, 1.0),
            ],
            &spec,
        )
        .unwrap();
        assert!(f.memory_asked && !f.cpus_asked);
        assert_eq!(f.memory_peak_bytes, Some(20 * G));
        assert_eq!((f.cpu_seconds, f.wall_seconds), (Some(350.0), 400.0));
        assert!(f.oom_killed);
        assert_eq!(f.cores_used(), Some(0.875));
        assert_eq!(HostFigures::of_attempts(&[], &spec), None);
    }

    #[test]
    fn sizes_and_cpu_time_read_as_people_write_them() {
        assert_eq!(bytes_text(64 * G), "64 GiB");
        assert_eq!(bytes_text(9 * G + G / 10), "9.1 GiB");
        assert_eq!(bytes_text(768 << 20), "768 MiB");
        assert_eq!(memory_to_ask(11.25 * G as f64), 12 * G);
        assert_eq!(memory_to_ask(100.0 * G as f64), 104 * G);
        assert_eq!(mem_flag(768 << 20), "768M");
        assert_eq!(cpu_time_text(3.2 * 3600.0), "3.2 core-hours");
        assert_eq!(cpu_time_text(90.0), "2 core-minutes");
        assert_eq!(cpu_time_text(0.23), "0.2 core-seconds");
    }

    #[test]
    fn an_attempts_figures_in_words() {
        let h = crate::job::HostUsage {
            oom_killed: false,
            memory_peak_bytes: Some(9 * G + G / 10),
            memory_limit_bytes: Some(64 * G),
            cpu_seconds: Some(3.2 * 3600.0),
            cpus: Some(8),
        };
        assert_eq!(
            memory_words(&h, true).unwrap(),
            "asked 64 GiB, peaked at 9.1 GiB"
        );
        assert_eq!(
            cpu_words(&h, Some(3600.0)).unwrap(),
            "8 cores, 3.2 core-hours (3.2 busy on average)"
        );
        let killed = crate::job::HostUsage {
            oom_killed: true,
            memory_peak_bytes: Some(32 * G),
            memory_limit_bytes: Some(32 * G),
            cpus: None,
            ..h.clone()
        };
        assert_eq!(
            memory_words(&killed, false).unwrap(),
            "given 32 GiB, peaked at 32 GiB: out of memory at its limit"
        );
        assert_eq!(
            cpu_words(&killed, None).unwrap(),
            "no reserved cores, 3.2 core-hours"
        );
        assert_eq!(memory_words(&crate::job::HostUsage::default(), true), None);
        // Slurm says OUT_OF_MEMORY without figures.
        let bare = crate::job::HostUsage {
            oom_killed: true,
            ..Default::default()
        };
        assert_eq!(
            memory_words(&bare, true).unwrap(),
            "out of memory at its limit (no figures counted)"
        );
    }
}
