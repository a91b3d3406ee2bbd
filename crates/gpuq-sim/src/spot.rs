//! Spot decisions for a deadline job, on the public AWS V100 spot traces of
//! "Can't Be Late" (NSDI'24) as republished by the SkyNomad artifact, in the
//! exact setting of SkyNomad's published V100 results, with those results
//! beside ours. The policies and the model are `gpuq_core::spot`; this module
//! reads the data, cuts the windows and makes the table.
//!
//! The data directory holds `<zone>_<device>.csv` files (`date,availability`,
//! one row per sample, the same timestamps in every zone), a JSON object of
//! spot prices (`{"<zone>_<device>": [dollars per hour, one per CSV row]}`),
//! and optionally the published results (`skynomad_v100_sim_results.csv`).
//!
//! Ticks are the sample rows, each counted as the fixed 195 s of the
//! published model (`gap_seconds` of the artifact is the first sample step);
//! the rows' real spacing (194 to 280 s) is reported, not used.

use gpuq_core::spot::{
    offline_optimum, on_demand_cost, replay, simulate, Greedy, Job, OnDemandOnly, Optimum,
    SlackAware, SpotEnv, SpotError as CoreError, SpotOutcome, SpotPolicy, SpotRegion,
    UniformProgress,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The published results file, when the data directory has it.
pub const PUBLISHED_FILE: &str = "skynomad_v100_sim_results.csv";

#[derive(Debug, thiserror::Error)]
pub enum SpotError {
    #[error("cannot read {}: {}", .path.display(), crate::trace::io_reason(.source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Data { path: PathBuf, why: String },
    #[error(transparent)]
    Model(#[from] CoreError),
    #[error("window {window} (tick {start}) needs {need} ticks, the data has {have}")]
    Window {
        window: usize,
        start: usize,
        need: usize,
        have: usize,
    },
    #[error("cost model check failed: {0}")]
    Check(String),
}

/// The experiment: which zones, which job, which windows, which prices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpotSetting {
    /// Zones, as in the file names (`us-east-1c` for `us-east-1c_v100_1.csv`).
    pub zones: Vec<String>,
    /// Seconds per tick (per sample row).
    pub tick_s: f64,
    pub on_demand_per_h: f64,
    pub work_h: f64,
    pub deadline_h: f64,
    pub restart_h: f64,
    /// Window numbers; window `w` starts at tick `w * deadline ticks` (the
    /// artifact's tiling of the full trace into deadline-long windows).
    pub windows: Vec<usize>,
    /// Checkpoint size, GB, moved on every change of region.
    pub checkpoint_gb: f64,
}

impl SpotSetting {
    /// SkyNomad's V100 setting (`scripts_multi/benchmark_components/configs/v100.py`
    /// of the artifact, and the columns of its results file): 1106 ticks of
    /// 195 s to the deadline (59.908 h, the 60 h window files' 1107 ticks less
    /// one), work = deadline / 1.5 = 39.939 h, restart 0.2 h, windows 3, 5, 7,
    /// 8, 14 (starting at 179.7, 299.5, 419.4, 479.3, 838.7 h), checkpoint
    /// 50 GB, on-demand $3.06/h (p3.2xlarge).
    pub fn skynomad_v100() -> SpotSetting {
        let deadline_h = 1106.0 * 195.0 / 3600.0;
        SpotSetting {
            zones: ["us-east-1c", "us-east-2b", "us-west-2a"]
                .map(String::from)
                .to_vec(),
            tick_s: 195.0,
            on_demand_per_h: 3.06,
            work_h: deadline_h / 1.5,
            deadline_h,
            restart_h: 0.2,
            windows: vec![3, 5, 7, 8, 14],
            checkpoint_gb: 50.0,
        }
    }

    fn job(&self) -> Job {
        Job {
            work_h: self.work_h,
            deadline_h: self.deadline_h,
            restart_h: self.restart_h,
        }
    }

    /// Ticks per window (to the deadline).
    pub fn window_ticks(&self) -> usize {
        (self.deadline_h * 3600.0 / self.tick_s + 1e-9).floor() as usize
    }
}

/// AWS S3 inter-region transfer, dollars per GB, as the SkyNomad artifact
/// bills a migration (`sky_spot/migration_model.py`): free within a region
/// (across its zones), $0.01 between us-east-1 and us-east-2, $0.02 between
/// other US regions.
pub fn transfer_usd_per_gb(from_zone: &str, to_zone: &str) -> f64 {
    let region = |z: &str| {
        z.trim_end_matches(|c: char| c.is_ascii_lowercase())
            .to_string()
    };
    let (a, b) = (region(from_zone), region(to_zone));
    if a == b {
        0.0
    } else if matches!(
        (a.as_str(), b.as_str()),
        ("us-east-1", "us-east-2") | ("us-east-2", "us-east-1")
    ) {
        0.01
    } else {
        0.02
    }
}

/// One policy on one region set, over the windows.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub policy: String,
    /// The zones it may use, joined by `+`.
    pub regions: String,
    /// Dollars per window, in the order of the setting's windows.
    pub costs: Vec<f64>,
    pub mean: f64,
    /// The published policy this row is compared with (the same policy for
    /// Uniform Progress and the optimum; SkyNomad for ours on all zones;
    /// Uniform Progress of the zone for ours on one zone).
    pub reference: Option<String>,
    /// Its published cost per window.
    pub published: Option<Vec<f64>>,
    pub published_mean: Option<f64>,
    /// Windows where the deadline was missed (must be 0).
    pub misses: usize,
    /// Means over the windows.
    pub preemptions: f64,
    pub launches: f64,
    pub migrations: f64,
    pub spot_h: f64,
    pub on_demand_h: f64,
    pub finished_at_h: f64,
    /// Ticks where the deadline guarantee overrode the policy (total).
    pub forced: u32,
    pub outcomes: Vec<SpotOutcome>,
}

/// Facts about the data, for the record.
#[derive(Debug, Clone, Serialize)]
pub struct DataSummary {
    pub rows: usize,
    pub first_unix_s: i64,
    pub last_unix_s: i64,
    pub median_step_s: i64,
    pub min_step_s: i64,
    pub max_step_s: i64,
    /// Real hours covered by each window's rows (vs the model's ticks × 195 s).
    pub window_real_h: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpotReport {
    pub setting: SpotSetting,
    pub data: DataSummary,
    pub on_demand_only_usd: f64,
    pub rows: Vec<Row>,
    /// Every optimum plan replayed through the simulator at its DP cost (the
    /// cost-model check), and no policy under the optimum of its region set.
    pub checks: Vec<String>,
}

/// [`evaluate_with`] in SkyNomad's V100 setting.
pub fn evaluate(dir: &Path) -> Result<SpotReport, SpotError> {
    evaluate_with(dir, &SpotSetting::skynomad_v100())
}

/// Runs every policy of the comparison on every window of `setting`.
pub fn evaluate_with(dir: &Path, setting: &SpotSetting) -> Result<SpotReport, SpotError> {
    let traces = load(dir, &setting.zones)?;
    let published_path = dir.join(PUBLISHED_FILE);
    let published = if published_path.is_file() {
        Some(load_published(&published_path, setting)?)
    } else {
        None
    };
    let t_len = setting.window_ticks();
    let job = setting.job();
    let n = setting.zones.len();
    let all: Vec<usize> = (0..n).collect();
    let mut envs = Vec::new();
    let mut window_real_h = Vec::new();
    for &w in &setting.windows {
        let start = w * t_len;
        if start + t_len > traces.times.len() {
            return Err(SpotError::Window {
                window: w,
                start,
                need: t_len,
                have: traces.times.len(),
            });
        }
        window_real_h.push((traces.times[start + t_len - 1] - traces.times[start]) as f64 / 3600.0);
        let regions = (0..n)
            .map(|i| SpotRegion {
                name: setting.zones[i].clone(),
                available: traces.available[i][start..start + t_len].to_vec(),
                price_per_h: traces.prices[i][start..start + t_len].to_vec(),
            })
            .collect();
        let transfer_usd = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        setting.checkpoint_gb
                            * transfer_usd_per_gb(&setting.zones[i], &setting.zones[j])
                    })
                    .collect()
            })
            .collect();
        let env = SpotEnv {
            tick_s: setting.tick_s,
            on_demand_per_h: setting.on_demand_per_h,
            regions,
            transfer_usd,
        };
        env.validate()?;
        envs.push(env);
    }

    // (regions, published reference, maker)
    type Maker = Box<dyn Fn() -> Box<dyn SpotPolicy>>;
    let up = |i: usize| {
        Some(Reference::new(
            "rc_cr_threshold",
            &setting.zones[i],
            "Uniform Progress",
        ))
    };
    let mut plan: Vec<(Vec<usize>, Option<Reference>, Maker)> = Vec::new();
    for i in 0..n {
        plan.push((
            vec![i],
            up(i),
            Box::new(|| Box::new(UniformProgress { region: 0 })),
        ));
    }
    for i in 0..n {
        plan.push((vec![i], up(i), Box::new(|| Box::new(SlackAware::default()))));
    }
    let skynomad = Reference::new("unified_cost_model_rate_ratio", "", "SkyNomad");
    plan.push((
        all.clone(),
        Some(skynomad),
        Box::new(|| Box::new(SlackAware::default())),
    ));
    plan.push((all.clone(), None, Box::new(|| Box::new(Greedy))));
    plan.push((all.clone(), None, Box::new(|| Box::new(OnDemandOnly))));

    let mut rows = Vec::new();
    let mut checks = Vec::new();
    let mut optimum_of: BTreeMap<Vec<usize>, Vec<f64>> = BTreeMap::new();
    // The optimum for each region set (single zones and all).
    let mut sets: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    sets.push(all.clone());
    // The optimum is the slow part (about a second and 100 MB per window on
    // three zones): as many at once as there are cores.
    let tasks: Vec<(usize, usize)> = (0..sets.len())
        .flat_map(|a| (0..envs.len()).map(move |b| (a, b)))
        .collect();
    let results: Vec<std::sync::Mutex<Option<Result<Optimum, CoreError>>>> =
        tasks.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tasks.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(a, b)) = tasks.get(k) else { break };
                let r = offline_optimum(&envs[b].subset(&sets[a]), &job);
                *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    let mut results = results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
    let optima: Vec<Vec<Result<Optimum, CoreError>>> = sets
        .iter()
        .map(|_| {
            (0..envs.len())
                .map(|_| results.next().flatten().expect("every optimum computed"))
                .collect()
        })
        .collect();
    for (set, opts) in sets.iter().zip(optima) {
        let mut outcomes = Vec::new();
        for (k, (env, opt)) in envs.iter().zip(opts).enumerate() {
            let sub = env.subset(set);
            let opt = opt?;
            let rep = replay(&sub, &job, &opt.plan)?;
            if !rep.met_deadline || (rep.cost - opt.cost).abs() > 1e-6 {
                return Err(SpotError::Check(format!(
                    "window {}: optimum {:.6} replays at {:.6} (met deadline: {})",
                    setting.windows[k], opt.cost, rep.cost, rep.met_deadline
                )));
            }
            let mut o = rep;
            o.policy = "offline_optimum".into();
            outcomes.push(o);
        }
        optimum_of.insert(set.clone(), outcomes.iter().map(|o| o.cost).collect());
        let reference =
            (set.len() == n).then(|| Reference::new("multi_region_oracle_dp", "", "oracle DP"));
        rows.push(make_row(
            setting,
            set,
            outcomes,
            reference,
            published.as_ref(),
        ));
        checks.push(format!(
            "optimum on {}: every plan replays through the simulator at its DP cost (within $1e-6) and meets the deadline",
            zones_label(setting, set)
        ));
    }
    for (set, reference, maker) in &plan {
        let mut outcomes = Vec::new();
        for env in &envs {
            let sub = env.subset(set);
            let mut p = maker();
            outcomes.push(simulate(&sub, &job, p.as_mut())?);
        }
        let opt = &optimum_of[set];
        for (k, o) in outcomes.iter().enumerate() {
            if o.cost < opt[k] - 1e-6 {
                return Err(SpotError::Check(format!(
                    "{} on {} window {}: {:.4} below the optimum {:.4}",
                    o.policy,
                    zones_label(setting, set),
                    setting.windows[k],
                    o.cost,
                    opt[k]
                )));
            }
        }
        rows.push(make_row(
            setting,
            set,
            outcomes,
            reference.clone(),
            published.as_ref(),
        ));
    }
    checks.push("no policy below the optimum of its region set in any window".into());
    // How close our model comes to the published one.
    for r in &rows {
        let Some(p) = &r.published else { continue };
        let diffs: Vec<f64> = r.costs.iter().zip(p).map(|(a, b)| a - b).collect();
        let max = diffs.iter().fold(0.0f64, |m, d| m.max(d.abs()));
        let what = match r.policy.as_str() {
            "uniform_progress" => "reproduces",
            "offline_optimum" => "compared with",
            _ => continue,
        };
        checks.push(format!(
            "{} on {} {} the published {} to ${max:.3} at most per window (ours minus published: {})",
            r.policy,
            r.regions,
            what,
            r.reference.as_deref().unwrap_or(""),
            diffs.iter().map(|d| format!("{d:+.3}")).collect::<Vec<_>>().join(", ")
        ));
    }
    // Keep the optimum rows last, in the order single zones then all.
    let k = sets.len();
    rows.rotate_left(k);

    let steps: Vec<i64> = traces.times.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = steps.clone();
    sorted.sort_unstable();
    let data = DataSummary {
        rows: traces.times.len(),
        first_unix_s: traces.times[0],
        last_unix_s: *traces.times.last().unwrap_or(&0),
        median_step_s: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
        min_step_s: sorted.first().copied().unwrap_or(0),
        max_step_s: sorted.last().copied().unwrap_or(0),
        window_real_h,
    };
    let env0 = envs.first().map(|e| e.subset(&[0]));
    let on_demand_only_usd = match env0 {
        Some(e) => on_demand_cost(&e, &job)?,
        None => 0.0,
    };
    Ok(SpotReport {
        setting: setting.clone(),
        data,
        on_demand_only_usd,
        rows,
        checks,
    })
}

fn zones_label(setting: &SpotSetting, set: &[usize]) -> String {
    set.iter()
        .map(|&i| setting.zones[i].as_str())
        .collect::<Vec<_>>()
        .join("+")
}

fn make_row(
    setting: &SpotSetting,
    set: &[usize],
    outcomes: Vec<SpotOutcome>,
    reference: Option<Reference>,
    published: Option<&Published>,
) -> Row {
    let n = outcomes.len().max(1) as f64;
    let mean = |f: &dyn Fn(&SpotOutcome) -> f64| outcomes.iter().map(f).sum::<f64>() / n;
    let published: Option<Vec<f64>> = reference.as_ref().and_then(|r| {
        let m = published?.get(&r.strategy, &r.zone)?;
        setting.windows.iter().map(|w| m.get(w).copied()).collect()
    });
    let published_mean = published
        .as_ref()
        .map(|p| p.iter().sum::<f64>() / p.len().max(1) as f64);
    Row {
        policy: outcomes
            .first()
            .map(|o| o.policy.clone())
            .unwrap_or_default(),
        regions: zones_label(setting, set),
        costs: outcomes.iter().map(|o| o.cost).collect(),
        mean: mean(&|o| o.cost),
        reference: reference.filter(|_| published.is_some()).map(|r| r.label),
        published,
        published_mean,
        misses: outcomes.iter().filter(|o| !o.met_deadline).count(),
        preemptions: mean(&|o| o.preemptions as f64),
        launches: mean(&|o| o.launches as f64),
        migrations: mean(&|o| o.migrations as f64),
        spot_h: mean(&|o| o.spot_h),
        on_demand_h: mean(&|o| o.on_demand_h),
        finished_at_h: mean(&|o| o.finished_at_h.unwrap_or(f64::NAN)),
        forced: outcomes.iter().map(|o| o.forced).sum(),
        outcomes,
    }
}

impl fmt::Display for SpotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.setting;
        writeln!(
            f,
            "Spot vs on-demand, {} h of work, deadline {:.3} h, restart {} h, tick {} s, on-demand ${}/h, checkpoint {} GB; windows {:?}.",
            fmt_num(s.work_h, 3),
            s.deadline_h,
            s.restart_h,
            s.tick_s,
            s.on_demand_per_h,
            s.checkpoint_gb,
            s.windows
        )?;
        writeln!(f)?;
        write!(f, "| policy | regions |")?;
        for w in &s.windows {
            write!(f, " w{w} |")?;
        }
        writeln!(f, " mean | published, mean | misses |")?;
        write!(f, "|---|---|")?;
        for _ in &s.windows {
            write!(f, "---:|")?;
        }
        writeln!(f, "---:|---|---:|")?;
        for r in &self.rows {
            write!(f, "| {} | {} |", r.policy, r.regions)?;
            for c in &r.costs {
                write!(f, " {c:.2} |")?;
            }
            let pm = match (&r.reference, r.published_mean) {
                (Some(name), Some(m)) => format!("{name}: {m:.2}"),
                _ => String::new(),
            };
            writeln!(f, " **{:.2}** | {} | {} |", r.mean, pm, r.misses)?;
        }
        writeln!(f)?;
        writeln!(f, "Published per window (SkyNomad artifact, same setting):")?;
        writeln!(f)?;
        write!(f, "| policy | regions |")?;
        for w in &s.windows {
            write!(f, " w{w} |")?;
        }
        writeln!(f, " mean |")?;
        write!(f, "|---|---|")?;
        for _ in &s.windows {
            write!(f, "---:|")?;
        }
        writeln!(f, "---:|")?;
        let mut shown = std::collections::BTreeSet::new();
        for r in self.rows.iter().filter(|r| r.published.is_some()) {
            let name = r.reference.clone().unwrap_or_default();
            if !shown.insert(name.clone()) {
                continue;
            }
            let p = r.published.as_deref().unwrap_or(&[]);
            write!(f, "| {} | {} |", name, r.regions)?;
            for c in p {
                write!(f, " {c:.2} |")?;
            }
            writeln!(f, " {:.2} |", r.published_mean.unwrap_or(f64::NAN))?;
        }
        writeln!(f)?;
        writeln!(f, "Means per window: spot and on-demand hours, preemptions, instance starts, region changes, guarantee overrides (total):")?;
        writeln!(f)?;
        writeln!(f, "| policy | regions | spot h | on-demand h | done at h | preemptions | starts | migrations | forced |")?;
        writeln!(f, "|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for r in &self.rows {
            writeln!(
                f,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
                r.policy,
                r.regions,
                r.spot_h,
                r.on_demand_h,
                r.finished_at_h,
                r.preemptions,
                r.launches,
                r.migrations,
                r.forced
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Data: {} rows per zone, steps {} s median ({}..{} s); the model counts each row as {} s. On-demand only: ${:.2}.",
            self.data.rows, self.data.median_step_s, self.data.min_step_s, self.data.max_step_s, s.tick_s, self.on_demand_only_usd
        )?;
        writeln!(f)?;
        for c in &self.checks {
            writeln!(f, "- Check: {c}.")?;
        }
        Ok(())
    }
}

fn fmt_num(x: f64, d: usize) -> String {
    format!("{x:.d$}")
}

mod data;
use data::Reference;
pub use data::{load, load_published, Published, Traces};
#[cfg(test)]
use data::{parse_datetime, split_csv};

#[cfg(test)]
mod tests;
