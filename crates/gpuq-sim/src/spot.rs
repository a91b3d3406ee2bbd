//! Spot decisions for a deadline job, on any spot data in the provider-neutral
//! format of [`format`] (zones with per-zone on-demand prices, a regular tick
//! inferred from the data), judged window by window against Uniform Progress,
//! greedy and the exact optimum. The policies and the model are
//! `gpuq_core::spot`; this module reads the data, cuts the windows and makes
//! the tables.
//!
//! Nothing here knows one provider: zones, prices, the tick and the windows
//! all come from the data and the setting. A published results file (the
//! SkyNomad artifact's CSV columns) can be set beside ours with
//! [`SpotSetting::published`].

use gpuq_core::spot::{
    offline_optimum, on_demand_cost, replay, simulate, Greedy, Job, OnDemandOnly, Optimum,
    SlackAware, SpotEnv, SpotError as CoreError, SpotOutcome, SpotPolicy, SpotRegion,
    UniformProgress,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The bound every window of our policy is judged against: at most this many
/// times the optimum's cost.
pub const WINDOW_BOUND: f64 = 1.5;

#[derive(Debug, thiserror::Error)]
pub enum SpotError {
    #[error("cannot read {}: {}", .path.display(), crate::trace::io_reason(.source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {why}", .path.display())]
    Data { path: PathBuf, why: String },
    #[error("{0}")]
    Usage(String),
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

/// Which windows: `n` starts evenly spaced over the span that leaves room for
/// the deadline, or given start times (hours after the data's first row).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Windows {
    Count(usize),
    StartsH(Vec<f64>),
}

/// The experiment: which zones, which job, which windows, which transfer
/// price.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpotSetting {
    /// Zones to use, in this order; empty: every zone of `zones.csv`.
    pub zones: Vec<String>,
    pub work_h: f64,
    pub deadline_h: f64,
    pub restart_h: f64,
    /// Checkpoint size, GB, moved on every change of zone.
    pub checkpoint_gb: f64,
    /// Dollars per GB moved between two zones.
    pub transfer_per_gb: f64,
    pub windows: Windows,
    /// A published results file to set beside ours (optional).
    pub published: Option<PathBuf>,
}

impl SpotSetting {
    fn job(&self) -> Job {
        Job {
            work_h: self.work_h,
            deadline_h: self.deadline_h,
            restart_h: self.restart_h,
        }
    }
}

/// One policy on one zone set, over the windows.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub policy: String,
    /// The zones it may use, joined by `+`.
    pub regions: String,
    /// Dollars per window, in the order of the windows.
    pub costs: Vec<f64>,
    pub mean: f64,
    /// Cost over the optimum of the same zones, per window.
    pub ratios: Vec<f64>,
    pub worst_ratio: f64,
    /// The published policy this row is compared with, if any.
    pub reference: Option<String>,
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

/// One window on all the zones, the policies side by side.
#[derive(Debug, Clone, Serialize)]
pub struct WindowRow {
    pub start_tick: usize,
    pub start_h: f64,
    pub optimum: f64,
    pub slack_aware: f64,
    pub greedy: f64,
    /// The cheapest zone's Uniform Progress in this window, and its zone.
    pub uniform_progress: f64,
    pub uniform_progress_zone: String,
    pub on_demand: f64,
}

/// Facts about the data, for the record.
#[derive(Debug, Clone, Serialize)]
pub struct DataSummary {
    pub zones: Vec<String>,
    pub on_demand_per_h: Vec<f64>,
    pub rows: usize,
    pub tick_s: f64,
    pub start_ms: i64,
    /// Fraction of ticks available, per zone, over the whole data.
    pub availability: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpotReport {
    pub setting: SpotSetting,
    pub data: DataSummary,
    pub window_ticks: usize,
    pub windows: Vec<WindowRow>,
    pub on_demand_only_usd: Vec<f64>,
    pub rows: Vec<Row>,
    /// Every plan (optimum and policies) replayed at its cost, no policy under
    /// the optimum, and the window bound of ours.
    pub checks: Vec<String>,
    /// Windows where our policy on all zones cost over [`WINDOW_BOUND`] times
    /// the optimum (must be none).
    pub over_bound: Vec<usize>,
}

/// Start ticks of the windows.
fn window_starts(
    w: &Windows,
    rows: usize,
    len: usize,
    tick_s: f64,
) -> Result<Vec<usize>, SpotError> {
    let starts: Vec<usize> = match w {
        Windows::Count(0) => return Err(SpotError::Usage("--windows 0: give at least one".into())),
        Windows::Count(n) => {
            let Some(last) = rows.checked_sub(len) else {
                return Err(SpotError::Window {
                    window: 0,
                    start: 0,
                    need: len,
                    have: rows,
                });
            };
            if *n == 1 {
                vec![0]
            } else {
                (0..*n)
                    .map(|i| ((i as f64 * last as f64) / (*n - 1) as f64).round() as usize)
                    .collect()
            }
        }
        Windows::StartsH(hs) => {
            let mut v = Vec::new();
            for h in hs {
                if !(h.is_finite() && *h >= 0.0) {
                    return Err(SpotError::Usage(format!(
                        "--start {h}: expected hours >= 0"
                    )));
                }
                v.push((h * 3600.0 / tick_s).round() as usize);
            }
            v
        }
    };
    for (i, &s) in starts.iter().enumerate() {
        if s + len > rows {
            return Err(SpotError::Window {
                window: i,
                start: s,
                need: len,
                have: rows,
            });
        }
    }
    Ok(starts)
}

/// The window of `traces` from row `start`, `len` rows long, every move
/// between two zones costing `move_usd`.
pub fn window_env(traces: &format::Traces, start: usize, len: usize, move_usd: f64) -> SpotEnv {
    let n = traces.zones.len();
    SpotEnv {
        tick_s: traces.tick_s,
        regions: (0..n)
            .map(|i| SpotRegion {
                name: traces.zones[i].clone(),
                available: traces.available[i][start..start + len].to_vec(),
                price_per_h: traces.prices[i][start..start + len].to_vec(),
                on_demand_per_h: traces.on_demand_per_h[i],
            })
            .collect(),
        transfer_usd: (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| if i == j { 0.0 } else { move_usd })
                    .collect()
            })
            .collect(),
    }
}

/// Runs every policy of the comparison on every window of `setting`.
pub fn evaluate(dir: &Path, setting: &SpotSetting) -> Result<SpotReport, SpotError> {
    let only = (!setting.zones.is_empty()).then_some(setting.zones.as_slice());
    let traces = format::load(dir, only)?;
    let tick_s = traces.tick_s;
    let t_len = (setting.deadline_h * 3600.0 / tick_s + 1e-9).floor() as usize;
    if t_len == 0 {
        return Err(SpotError::Usage(format!(
            "--deadline {} h is shorter than one tick ({tick_s} s)",
            setting.deadline_h
        )));
    }
    let starts = window_starts(&setting.windows, traces.rows(), t_len, tick_s)?;
    let starts_h: Vec<f64> = starts.iter().map(|&s| s as f64 * tick_s / 3600.0).collect();
    let published = match &setting.published {
        Some(p) => Some(load_published(p, &starts_h, tick_s / 3600.0)?),
        None => None,
    };
    let job = setting.job();
    let n = traces.zones.len();
    let all: Vec<usize> = (0..n).collect();
    let label = |set: &[usize]| {
        set.iter()
            .map(|&i| traces.zones[i].as_str())
            .collect::<Vec<_>>()
            .join("+")
    };
    let move_usd = setting.checkpoint_gb * setting.transfer_per_gb;
    let envs: Vec<SpotEnv> = starts
        .iter()
        .map(|&start| window_env(&traces, start, t_len, move_usd))
        .collect();
    for e in &envs {
        e.validate()?;
    }

    // The zone sets: each zone alone, and all of them (when more than one).
    let mut sets: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    if n > 1 {
        sets.push(all.clone());
    }
    let optima = optima(&sets, &envs, &job);
    let mut rows = Vec::new();
    let mut checks = Vec::new();
    let mut optimum_of: BTreeMap<Vec<usize>, Vec<f64>> = BTreeMap::new();
    let reference = |set: &[usize]| -> Option<(String, String)> {
        (set.len() == n && n > 1).then(|| ("multi_region_oracle_dp".into(), String::new()))
    };
    for (set, opts) in sets.iter().zip(optima) {
        let mut outcomes = Vec::new();
        for (k, (env, opt)) in envs.iter().zip(opts).enumerate() {
            let sub = env.subset(set);
            let opt = opt?;
            let rep = replay(&sub, &job, &opt.plan)?;
            if !rep.met_deadline || (rep.cost - opt.cost).abs() > 1e-6 {
                return Err(SpotError::Check(format!(
                    "window {k}: optimum {:.6} replays at {:.6} (met deadline: {})",
                    opt.cost, rep.cost, rep.met_deadline
                )));
            }
            let mut o = rep;
            o.policy = "offline_optimum".into();
            outcomes.push(o);
        }
        let costs: Vec<f64> = outcomes.iter().map(|o| o.cost).collect();
        optimum_of.insert(set.clone(), costs.clone());
        rows.push(make_row(
            label(set),
            outcomes,
            &costs,
            reference(set),
            published.as_ref(),
        ));
    }
    checks.push(
        "every optimum plan replays through the simulator at its DP cost (within $1e-6) and meets the deadline"
            .into(),
    );

    type Maker = Box<dyn Fn() -> Box<dyn SpotPolicy>>;
    type Ref = Option<(String, String)>;
    let mut plan: Vec<(Vec<usize>, Ref, Maker)> = Vec::new();
    for i in 0..n {
        let up = Some(("rc_cr_threshold".to_string(), traces.zones[i].clone()));
        plan.push((
            vec![i],
            up.clone(),
            Box::new(|| Box::new(UniformProgress { region: 0 })),
        ));
        plan.push((vec![i], up, Box::new(|| Box::new(SlackAware::default()))));
    }
    if n > 1 {
        let sky = Some(("unified_cost_model_rate_ratio".to_string(), String::new()));
        plan.push((
            all.clone(),
            sky,
            Box::new(|| Box::new(SlackAware::default())),
        ));
        plan.push((all.clone(), None, Box::new(|| Box::new(Greedy))));
    }
    plan.push((all.clone(), None, Box::new(|| Box::new(OnDemandOnly))));
    for (set, reference, maker) in &plan {
        let mut outcomes = Vec::new();
        for (k, env) in envs.iter().enumerate() {
            let sub = env.subset(set);
            let mut p = maker();
            let o = simulate(&sub, &job, p.as_mut())?;
            let rep = replay(&sub, &job, &o.plan)?;
            if (rep.cost - o.cost).abs() > 1e-6 || !rep.met_deadline {
                return Err(SpotError::Check(format!(
                    "{} on {} window {k}: reports {:.6}, its plan replays at {:.6}",
                    o.policy,
                    label(set),
                    o.cost,
                    rep.cost
                )));
            }
            let opt = optimum_of[set][k];
            if o.cost < opt - 1e-6 {
                return Err(SpotError::Check(format!(
                    "{} on {} window {k}: {:.4} below the optimum {opt:.4}",
                    o.policy,
                    label(set),
                    o.cost
                )));
            }
            outcomes.push(o);
        }
        rows.push(make_row(
            label(set),
            outcomes,
            &optimum_of[set],
            reference.clone(),
            published.as_ref(),
        ));
    }
    checks.push("every policy's plan replays through the simulator at the cost it reports, and none is below the optimum of its zones in any window".into());
    // The optimum rows last.
    rows.rotate_left(sets.len());

    let all_label = label(&all);
    let find = |policy: &str| {
        rows.iter()
            .find(|r| r.policy == policy && r.regions == all_label)
            .map(|r| r.costs.clone())
            .unwrap_or_default()
    };
    let opt = optimum_of[&all].clone();
    let ours = if n > 1 {
        find("slack_aware")
    } else {
        rows.iter()
            .find(|r| r.policy == "slack_aware")
            .map(|r| r.costs.clone())
            .unwrap_or_default()
    };
    let greedy = if n > 1 { find("greedy") } else { Vec::new() };
    let od = find("on_demand");
    let ups: Vec<&Row> = rows
        .iter()
        .filter(|r| r.policy == "uniform_progress")
        .collect();
    let windows: Vec<WindowRow> = (0..starts.len())
        .map(|k| {
            let (up, zone) = ups
                .iter()
                .map(|r| (r.costs[k], r.regions.clone()))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap_or((f64::NAN, String::new()));
            WindowRow {
                start_tick: starts[k],
                start_h: starts_h[k],
                optimum: opt[k],
                slack_aware: ours[k],
                greedy: greedy.get(k).copied().unwrap_or(f64::NAN),
                uniform_progress: up,
                uniform_progress_zone: zone,
                on_demand: od[k],
            }
        })
        .collect();
    let over_bound: Vec<usize> = windows
        .iter()
        .enumerate()
        .filter(|(_, w)| w.slack_aware > WINDOW_BOUND * w.optimum + 1e-9)
        .map(|(k, _)| k)
        .collect();
    let worst = windows
        .iter()
        .map(|w| w.slack_aware / w.optimum)
        .fold(0.0, f64::max);
    checks.push(format!(
        "slack_aware on {all_label}: worst window {worst:.3}x the optimum (bound {WINDOW_BOUND}x): {}",
        if over_bound.is_empty() {
            "every window within".to_string()
        } else {
            format!("OVER in windows {over_bound:?}")
        }
    ));
    for r in &rows {
        let Some(p) = &r.published else { continue };
        let diffs: Vec<String> = r
            .costs
            .iter()
            .zip(p)
            .map(|(a, b)| format!("{:+.3}", a - b))
            .collect();
        checks.push(format!(
            "{} on {} minus the published {}: {}",
            r.policy,
            r.regions,
            r.reference.as_deref().unwrap_or(""),
            diffs.join(", ")
        ));
    }
    let rows_n = traces.rows().max(1) as f64;
    let data = DataSummary {
        zones: traces.zones.clone(),
        on_demand_per_h: traces.on_demand_per_h.clone(),
        rows: traces.rows(),
        tick_s,
        start_ms: traces.start_ms,
        availability: traces
            .available
            .iter()
            .map(|a| a.iter().filter(|x| **x).count() as f64 / rows_n)
            .collect(),
    };
    let on_demand_only_usd = envs
        .iter()
        .map(|e| on_demand_cost(e, &job))
        .collect::<Result<_, _>>()?;
    Ok(SpotReport {
        setting: setting.clone(),
        data,
        window_ticks: t_len,
        windows,
        on_demand_only_usd,
        rows,
        checks,
        over_bound,
    })
}

/// The optimum of every zone set in every window, as many at once as there
/// are cores (it is the slow part).
fn optima(
    sets: &[Vec<usize>],
    envs: &[SpotEnv],
    job: &Job,
) -> Vec<Vec<Result<Optimum, CoreError>>> {
    let tasks: Vec<(usize, usize)> = (0..sets.len())
        .flat_map(|a| (0..envs.len()).map(move |b| (a, b)))
        .collect();
    let results: Vec<std::sync::Mutex<Option<Result<Optimum, CoreError>>>> =
        tasks.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tasks.len())
        .max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(a, b)) = tasks.get(k) else { break };
                let r = offline_optimum(&envs[b].subset(&sets[a]), job);
                *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    let mut results = results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
    sets.iter()
        .map(|_| {
            (0..envs.len())
                .map(|_| results.next().flatten().expect("every optimum computed"))
                .collect()
        })
        .collect()
}

fn make_row(
    regions: String,
    outcomes: Vec<SpotOutcome>,
    optimum: &[f64],
    reference: Option<(String, String)>,
    published: Option<&Published>,
) -> Row {
    let n = outcomes.len().max(1) as f64;
    let mean = |f: &dyn Fn(&SpotOutcome) -> f64| outcomes.iter().map(f).sum::<f64>() / n;
    let costs: Vec<f64> = outcomes.iter().map(|o| o.cost).collect();
    let ratios: Vec<f64> = costs.iter().zip(optimum).map(|(c, o)| c / o).collect();
    let pubd: Option<Vec<f64>> = reference.as_ref().and_then(|(s, z)| {
        let m = published?.get(s, z)?;
        (0..costs.len()).map(|w| m.get(&w).copied()).collect()
    });
    let published_mean = pubd
        .as_ref()
        .map(|p| p.iter().sum::<f64>() / p.len().max(1) as f64);
    Row {
        policy: outcomes
            .first()
            .map(|o| o.policy.clone())
            .unwrap_or_default(),
        regions,
        mean: mean(&|o| o.cost),
        worst_ratio: ratios.iter().copied().fold(0.0, f64::max),
        ratios,
        costs,
        reference: reference.filter(|_| pubd.is_some()).map(|(s, z)| {
            if z.is_empty() {
                s
            } else {
                format!("{s} {z}")
            }
        }),
        published: pubd,
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

mod data;
mod display;
pub mod format;
pub use data::{load as load_legacy, load_published, Legacy, Published};
#[cfg(test)]
use data::{parse_datetime, split_csv};
pub use format::{convert, load, Converted, Traces};

#[cfg(test)]
mod tests;
