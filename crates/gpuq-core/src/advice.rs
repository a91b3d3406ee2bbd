//! Right-sizing: from what a job used (telemetry) and the catalog, the cheaper
//! GPUs that would fit it, and the hints its figures call for.

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
}

pub fn advise(i: &AdviceInput) -> Advice {
    let gpus = i.gpus.max(1) as f64;
    // Memory alone (a job sampled once) is enough for the cards that fit it.
    let sampled = i
        .usage
        .filter(|u| u.sampled_gpu_seconds > 0.0 || u.memory_peak_mib.is_some());
    let Some(u) = sampled else {
        return Advice {
            job: i.job,
            basis: "no GPU telemetry for this job (it ran without GPUs, or before it was sampled)"
                .into(),
            options: vec![],
            hints: vec![],
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
    Advice {
        job: i.job,
        basis,
        options,
        hints,
    }
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
        });
        assert!(a.options.is_empty() && a.hints.is_empty());
        assert!(a.basis.contains("no GPU telemetry"));
    }
}
