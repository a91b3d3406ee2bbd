//! The comparison: every searcher the file supports, over the same seeds, and
//! the figures side by side.

use super::{
    goal_name, meets, option_err, replay, Curve, Curves, Run, SweepSimError, SweepSimOptions,
};
use gpuq_core::sweep::{Goal, SearcherKind};
use serde::Serialize;
use std::fmt;

/// Mean, standard deviation (population) and range of a figure over runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Some(Spread {
            n: values.len(),
            mean,
            sd: var.sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// The best value one searcher had at another searcher's total compute, in
/// the same seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtCompute {
    /// Whose total compute.
    pub of: &'static str,
    pub best: Option<Spread>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub searcher: &'static str,
    pub runs: usize,
    /// Runs that reached the target; the to-target figures are over these.
    pub reached: usize,
    pub compute_to_target_s: Option<Spread>,
    pub wall_to_target_s: Option<Spread>,
    /// Mean compute to the target over random search's; None unless both
    /// reached it in every run.
    pub compute_to_target_vs_random: Option<f64>,
    pub compute_s: Spread,
    pub wall_s: Spread,
    pub trials: Spread,
    pub attempts: Spread,
    /// The best value at the end of the run.
    pub best: Option<Spread>,
    pub best_at_equal_compute: Vec<AtCompute>,
}

/// What the recorded curves themselves hold, to read the runs against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStats {
    pub random_curves: usize,
    pub grid_curves: usize,
    /// Random curves reaching the target at max_step, and at any step up to it.
    pub random_reach_at_max_step: usize,
    pub random_reach_by_max_step: usize,
    pub grid_reach_at_max_step: usize,
    pub grid_reach_by_max_step: usize,
    /// Compute of one random curve to max_step, seconds.
    pub random_curve_compute_s: Option<Spread>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub metric: Option<String>,
    pub goal: &'static str,
    pub options: SweepSimOptions,
    /// Resolved: the trials per run of random search and ASHA, the top step,
    /// ASHA's rungs.
    pub max_trials: u32,
    pub max_step: u64,
    pub rungs: Vec<u64>,
    pub pool: PoolStats,
    pub summaries: Vec<Summary>,
    pub runs: Vec<Run>,
}

/// SplitMix64, for the per-seed shuffles (the core's generator is private to
/// it; the shuffle's stream only has to be fixed by this file).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A Fisher-Yates shuffle of `items` from `seed` (salted per pool, so the
/// grid's order is not the random pool's order).
fn shuffled<'a>(items: &[&'a Curve], seed: u64, salt: u64) -> Vec<&'a Curve> {
    let mut out = items.to_vec();
    let mut state = seed ^ salt.wrapping_mul(0xA24B_AED4_963E_E407);
    for i in (1..out.len()).rev() {
        let j = ((u128::from(splitmix(&mut state)) * (i as u128 + 1)) >> 64) as usize;
        out.swap(i, j);
    }
    out
}

fn validate(opts: &SweepSimOptions) -> Result<(), SweepSimError> {
    if !opts.target.is_finite() {
        return Err(option_err("--target", "must be a finite number"));
    }
    if opts.workers == 0 {
        return Err(option_err("--workers", "must be at least 1"));
    }
    if opts.seeds == 0 {
        return Err(option_err("--seeds", "must be at least 1"));
    }
    if !(opts.restart_overhead_s.is_finite() && opts.restart_overhead_s >= 0.0) {
        return Err(option_err(
            "--restart-overhead",
            "must be a number of seconds, at least 0",
        ));
    }
    if let Some(b) = opts.budget_s {
        if !(b.is_finite() && b > 0.0) {
            return Err(option_err(
                "--budget",
                "must be a number of seconds above 0",
            ));
        }
    }
    Ok(())
}

fn reach(curves: &[&Curve], goal: Goal, target: f64, max_step: u64) -> (usize, usize) {
    let hit = |v: f64| !v.is_nan() && meets(goal, v, target);
    let at = curves
        .iter()
        .filter(|c| c.value_at(max_step).is_some_and(hit))
        .count();
    let by = curves
        .iter()
        .filter(|c| {
            c.points
                .iter()
                .take_while(|p| p.step <= max_step)
                .any(|p| hit(p.value))
                || c.value_at(max_step).is_some_and(hit)
        })
        .count();
    (at, by)
}

/// Replays ASHA and random search over the file's random curves, and grid
/// search over its grid points, for `opts.seeds` seeds each.
pub fn compare(curves: &Curves, opts: &SweepSimOptions) -> Result<Comparison, SweepSimError> {
    validate(opts)?;
    let random = curves.random();
    let grid = curves.grid();
    let used = random.iter().chain(grid.iter());
    let max_step = match opts.max_step {
        Some(0) => return Err(option_err("--max-step", "must be at least 1")),
        Some(m) => m,
        None => used.clone().map(|c| c.last_step()).min().unwrap_or(1),
    };
    if let Some(short) = used.clone().find(|c| c.last_step() < max_step) {
        return Err(option_err(
            "--max-step",
            format!(
                "{max_step}, but the curve on line {} ends at step {}; lower --max-step",
                short.line,
                short.last_step()
            ),
        ));
    }
    let max_trials = match opts.max_trials {
        Some(0) => return Err(option_err("--max-trials", "must be at least 1")),
        Some(n) if n as usize > random.len() => {
            return Err(option_err(
                "--max-trials",
                format!(
                    "{n}, but the file has {} random curves: each trial replays its own",
                    random.len()
                ),
            ))
        }
        Some(n) => n,
        None => random.len() as u32,
    };
    let mut kinds = Vec::new();
    if !random.is_empty() {
        kinds.extend([SearcherKind::Asha, SearcherKind::Random]);
    }
    if !grid.is_empty() {
        kinds.push(SearcherKind::Grid);
    }
    let asha_spec = gpuq_core::sweep::SearcherSpec {
        name: SearcherKind::Asha,
        max_trials: max_trials.max(1),
        max_concurrent: opts.workers,
        max_step,
        min_step: opts.min_step,
        eta: opts.eta,
    };
    asha_spec.validate().map_err(|e| match e {
        gpuq_core::sweep::SweepError::Invalid { field, message } => option_err(
            &format!(
                "--{}",
                field.trim_start_matches("searcher.").replace('_', "-")
            ),
            message,
        ),
        other => SweepSimError::Searcher(other),
    })?;

    let mut runs = Vec::new();
    for seed in 0..u64::from(opts.seeds) {
        for &kind in &kinds {
            let order = match kind {
                SearcherKind::Grid => shuffled(&grid, seed, 2),
                _ => {
                    let mut o = shuffled(&random, seed, 1);
                    o.truncate(max_trials as usize);
                    o
                }
            };
            runs.push(replay(kind, &order, opts, max_step, seed)?);
        }
    }

    let names: Vec<&'static str> = kinds.iter().map(|&k| super::searcher_name(k)).collect();
    let random_ctt = mean_to_target(&runs, "random");
    let summaries = names
        .iter()
        .map(|&name| summarize(name, &names, &runs, random_ctt))
        .collect();
    let (random_reach_at_max_step, random_reach_by_max_step) =
        reach(&random, opts.goal, opts.target, max_step);
    let (grid_reach_at_max_step, grid_reach_by_max_step) =
        reach(&grid, opts.goal, opts.target, max_step);
    let per_curve: Vec<f64> = random
        .iter()
        .map(|c| {
            c.points
                .iter()
                .take_while(|p| p.step <= max_step)
                .map(|p| p.seconds)
                .sum()
        })
        .collect();
    Ok(Comparison {
        metric: curves.metric.clone(),
        goal: goal_name(opts.goal),
        options: opts.clone(),
        max_trials,
        max_step,
        rungs: asha_spec.rungs(),
        pool: PoolStats {
            random_curves: random.len(),
            grid_curves: grid.len(),
            random_reach_at_max_step,
            random_reach_by_max_step,
            grid_reach_at_max_step,
            grid_reach_by_max_step,
            random_curve_compute_s: Spread::of(&per_curve),
        },
        summaries,
        runs,
    })
}

fn of<'a>(runs: &'a [Run], name: &'a str) -> impl Iterator<Item = &'a Run> + 'a {
    runs.iter().filter(move |r| r.searcher == name)
}

/// The mean compute to the target, only when every run reached it: a mean
/// over the lucky runs alone would flatter a searcher that often misses.
fn mean_to_target(runs: &[Run], name: &str) -> Option<f64> {
    let v: Option<Vec<f64>> = of(runs, name)
        .map(|r| r.target.map(|h| h.compute_s))
        .collect();
    Spread::of(&v?).map(|s| s.mean)
}

fn summarize(
    name: &'static str,
    names: &[&'static str],
    runs: &[Run],
    random: Option<f64>,
) -> Summary {
    let mine: Vec<&Run> = of(runs, name).collect();
    let figure = |f: &dyn Fn(&Run) -> f64| {
        Spread::of(&mine.iter().map(|r| f(r)).collect::<Vec<_>>()).expect("every searcher has runs")
    };
    let hits: Vec<_> = mine.iter().filter_map(|r| r.target).collect();
    let compute_to_target_s = Spread::of(&hits.iter().map(|h| h.compute_s).collect::<Vec<_>>());
    let best_at_equal_compute = names
        .iter()
        .map(|&other| {
            // Pair by seed: the other searcher's total in the same shuffle.
            let values: Vec<f64> = mine
                .iter()
                .filter_map(|r| {
                    let theirs = of(runs, other).find(|o| o.seed == r.seed)?;
                    r.best_at(theirs.compute_s)
                })
                .collect();
            AtCompute {
                of: other,
                best: Spread::of(&values),
            }
        })
        .collect();
    Summary {
        searcher: name,
        runs: mine.len(),
        reached: hits.len(),
        compute_to_target_vs_random: match (mean_to_target(runs, name), random) {
            (Some(c), Some(r)) if r > 0.0 => Some(c / r),
            _ => None,
        },
        compute_to_target_s,
        wall_to_target_s: Spread::of(&hits.iter().map(|h| h.wall_s).collect::<Vec<_>>()),
        compute_s: figure(&|r| r.compute_s),
        wall_s: figure(&|r| r.wall_s),
        trials: figure(&|r| f64::from(r.trials)),
        attempts: figure(&|r| f64::from(r.attempts)),
        best: Spread::of(&mine.iter().filter_map(|r| r.best).collect::<Vec<_>>()),
        best_at_equal_compute,
    }
}

/// `mean ± sd [min–max]`, seconds to one decimal.
fn secs(s: &Option<Spread>) -> String {
    match s {
        Some(s) => format!("{:.1} ± {:.1} [{:.1}–{:.1}]", s.mean, s.sd, s.min, s.max),
        None => "—".into(),
    }
}

/// A metric's spread, to four decimals (a mean of accuracies out of a few
/// hundred examples needs them).
fn metric(s: &Option<Spread>) -> String {
    match s {
        Some(s) => format!("{:.4} ± {:.4}", s.mean, s.sd),
        None => "—".into(),
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let p = &self.pool;
        writeln!(
            f,
            "Sweep replay: {} {} to {} (target), {} worker(s), {} seeds; max_step {}, ASHA rungs {:?} (eta {}), {} trials for random and ASHA{}; restart overhead {} s per attempt{}; counting {}.",
            goal_name(o.goal),
            self.metric.as_deref().unwrap_or("the metric"),
            o.target,
            o.workers,
            o.seeds,
            self.max_step,
            self.rungs,
            o.eta,
            self.max_trials,
            if p.grid_curves > 0 { format!(", the whole grid ({}) for grid", p.grid_curves) } else { String::new() },
            o.restart_overhead_s,
            o.budget_s.map_or(String::new(), |b| format!(", budget {b} s of compute")),
            if o.rung_only { "only results at a rung (a checkpointed model)" } else { "every reported step" },
        )?;
        write!(
            f,
            "Curves: {} random draws, {} reach the target by step {} ({} at it)",
            p.random_curves, p.random_reach_by_max_step, self.max_step, p.random_reach_at_max_step
        )?;
        if p.grid_curves > 0 {
            write!(
                f,
                "; {} grid points, {} by step {} ({} at it)",
                p.grid_curves, p.grid_reach_by_max_step, self.max_step, p.grid_reach_at_max_step
            )?;
        }
        if let Some(c) = &p.random_curve_compute_s {
            write!(
                f,
                "; a random curve to step {} costs {:.2} s on average",
                self.max_step, c.mean
            )?;
        }
        writeln!(f, ".")?;
        writeln!(f)?;
        write!(f, "| searcher | reached | compute to target, s | wall to target, s | vs random | compute, s | wall, s | trials | attempts | best |")?;
        for s in &self.summaries {
            write!(f, " best at {}'s compute |", s.searcher)?;
        }
        writeln!(f)?;
        write!(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for _ in &self.summaries {
            write!(f, "---:|")?;
        }
        writeln!(f)?;
        for s in &self.summaries {
            write!(
                f,
                "| {} | {}/{} | {} | {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {:.1} | {:.1} | {} |",
                s.searcher,
                s.reached,
                s.runs,
                secs(&s.compute_to_target_s),
                secs(&s.wall_to_target_s),
                s.compute_to_target_vs_random.map_or("—".into(), |r| format!("{r:.2}")),
                s.compute_s.mean,
                s.compute_s.sd,
                s.wall_s.mean,
                s.wall_s.sd,
                s.trials.mean,
                s.attempts.mean,
                metric(&s.best),
            )?;
            for a in &s.best_at_equal_compute {
                write!(f, " {} |", metric(&a.best))?;
            }
            writeln!(f)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Means ± standard deviation [range] over the seeds; the to-target figures over the runs that reached it. \"vs random\": mean compute to target over random search's, where both reached it in every run. \"best at X's compute\": the best value by the time the run had spent what X spent in all, in the same seed."
        )
    }
}
