//! One run: a searcher on `workers` slots over curves in trial order, on a
//! virtual clock.
//!
//! A started or promoted trial holds a slot from its start, through the
//! restart overhead, then step by step at each recorded step's seconds; every
//! recorded step is reported to the searcher as the daemon reports every
//! logged step, and the first step at or past the trial's rung ends the
//! attempt (paused, or completed at the top rung). A promoted trial resumes
//! after the step it paused at, as from its checkpoint: the curve was
//! recorded in one go, which a resume that restores the model, the optimiser
//! and the random state reproduces exactly.

use super::{better, meets, option_err, searcher_name, Curve, SweepSimError, SweepSimOptions};
use gpuq_core::sweep::{
    Decision, Metric, Parameter, Searcher, SearcherKind, SearcherSpec, SweepSpec, TrialEnd, TrialId,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// When and where a run first reached the target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hit {
    /// Slot-seconds spent by then, by all slots together.
    pub compute_s: f64,
    /// Virtual time since the run started.
    pub wall_s: f64,
    pub trial: TrialId,
    pub step: u64,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub searcher: &'static str,
    pub seed: u64,
    /// Trials started.
    pub trials: u32,
    /// Starts and promotions: each one pays the restart overhead.
    pub attempts: u32,
    /// Steps trained, all trials together.
    pub steps: u64,
    pub compute_s: f64,
    pub wall_s: f64,
    /// Stopped by the compute budget rather than by the searcher's Done.
    pub budget_hit: bool,
    pub target: Option<Hit>,
    /// The best counted value (see `SweepSimOptions::rung_only`).
    pub best: Option<f64>,
    /// `[compute_s, wall_s, best]` each time the best improved.
    pub series: Vec<[f64; 3]>,
}

impl Run {
    /// The best value counted by the time the run had spent `compute_s`.
    pub fn best_at(&self, compute_s: f64) -> Option<f64> {
        self.series
            .iter()
            .take_while(|p| p[0] <= compute_s)
            .last()
            .map(|p| p[2])
    }
}

/// A trial training towards its rung in one slot.
struct Attempt<'a> {
    trial: TrialId,
    /// Start order, to break ties between simultaneous steps the same way on
    /// every run.
    seq: u64,
    curve: &'a Curve,
    /// The point it trains towards (its next report).
    next: usize,
    rung_step: u64,
    /// Virtual time at which `next` is reported.
    at: f64,
}

/// The spec the searcher runs: its parameters are placeholders, as trial `i`
/// gets curve `i` whatever the searcher would have drawn. Grid search gets a
/// one-parameter grid with a point per curve, so its trial count is the
/// grid's size, as for a real grid.
fn spec(kind: SearcherKind, trials: u32, opts: &SweepSimOptions, max_step: u64) -> SweepSpec {
    let mut parameters = BTreeMap::new();
    if kind == SearcherKind::Grid {
        let points = (0..trials).map(serde_json::Value::from).collect();
        parameters.insert("point".to_string(), Parameter::Grid(points));
    }
    SweepSpec {
        parameters,
        metric: Metric {
            name: "value".into(),
            goal: opts.goal,
        },
        searcher: SearcherSpec {
            name: kind,
            max_trials: trials,
            max_concurrent: opts.workers,
            max_step,
            min_step: opts.min_step,
            eta: opts.eta,
        },
    }
}

/// Replays `kind` over `curves` in trial order (trial `i` gets `curves[i]`);
/// `curves.len()` is the trial budget. Every curve must reach `max_step`.
pub fn replay(
    kind: SearcherKind,
    curves: &[&Curve],
    opts: &SweepSimOptions,
    max_step: u64,
    seed: u64,
) -> Result<Run, SweepSimError> {
    let trials =
        u32::try_from(curves.len()).map_err(|_| option_err("--max-trials", "too many curves"))?;
    let mut searcher = Searcher::new(&spec(kind, trials, opts, max_step), seed)?;
    let mut run = Run {
        searcher: searcher_name(kind),
        seed,
        trials: 0,
        attempts: 0,
        steps: 0,
        compute_s: 0.0,
        wall_s: 0.0,
        budget_hit: false,
        target: None,
        best: None,
        series: Vec::new(),
    };
    let mut running: Vec<Attempt> = Vec::new();
    // Per trial: the point it resumes at when promoted.
    let mut resume: Vec<usize> = vec![0; curves.len()];
    let mut seq = 0u64;
    'run: loop {
        let free = opts.workers.saturating_sub(running.len() as u32);
        let mut done = false;
        for d in searcher.next(free) {
            let (trial, step) = match d {
                Decision::Start {
                    trial, max_step, ..
                }
                | Decision::Promote { trial, max_step } => (trial, max_step),
                Decision::Stop { .. } => continue,
                Decision::Done => {
                    done = true;
                    continue;
                }
            };
            let curve = curves[trial as usize];
            let next = resume[trial as usize];
            let first = curve.points.get(next).map_or(0.0, |p| p.seconds);
            running.push(Attempt {
                trial,
                seq,
                curve,
                next,
                rung_step: step,
                at: run.wall_s + opts.restart_overhead_s + first,
            });
            seq += 1;
            run.attempts += 1;
        }
        if done || running.is_empty() {
            // The searcher says Done only with nothing running; an empty
            // slot set without Done cannot happen with a valid spec, but
            // ending beats spinning if it ever did.
            break;
        }
        // Advance to the next reported step; the slots free only when an
        // attempt reaches its rung, so only then ask the searcher again.
        loop {
            let i = (0..running.len())
                .min_by(|&a, &b| {
                    running[a]
                        .at
                        .total_cmp(&running[b].at)
                        .then(running[a].seq.cmp(&running[b].seq))
                })
                .expect("running is not empty");
            let at = running[i].at;
            let busy = running.len() as f64;
            let spent = busy * (at - run.wall_s);
            if let Some(budget) = opts.budget_s {
                if run.compute_s + spent > budget {
                    run.wall_s += (budget - run.compute_s).max(0.0) / busy;
                    run.compute_s = budget;
                    run.budget_hit = true;
                    break 'run;
                }
            }
            run.compute_s += spent;
            run.wall_s = at;
            let a = &mut running[i];
            let Some(point) = a.curve.points.get(a.next).copied() else {
                // Unreachable with curves checked to reach max_step; a curve
                // that ends early ends its trial.
                let trial = a.trial;
                running.swap_remove(i);
                searcher.on_trial_ended(trial, TrialEnd::Succeeded)?;
                continue 'run;
            };
            run.steps += 1;
            let at_rung = point.step >= a.rung_step;
            // Promoted at once into the slot it frees: it trains on, no restart.
            let train_on = match at_rung && !opts.pause_only {
                true => searcher.train_on_at_rung(a.trial, point.step, point.value)?,
                false => None,
            };
            if train_on.is_none() {
                searcher.on_trial_reported(a.trial, point.step, point.value)?;
            }
            if at_rung || !opts.rung_only {
                count(&mut run, opts, a.trial, point.step, point.value);
            }
            if let Some(step) = train_on {
                a.rung_step = step;
            } else if at_rung {
                resume[a.trial as usize] = a.next + 1;
                running.remove(i);
                continue 'run;
            }
            a.next += 1;
            a.at += a.curve.points.get(a.next).map_or(0.0, |p| p.seconds);
        }
    }
    run.trials = searcher.trials().len() as u32;
    Ok(run)
}

/// A counted result: the target, and the best so far.
fn count(run: &mut Run, opts: &SweepSimOptions, trial: TrialId, step: u64, value: f64) {
    if run.target.is_none() && !value.is_nan() && meets(opts.goal, value, opts.target) {
        run.target = Some(Hit {
            compute_s: run.compute_s,
            wall_s: run.wall_s,
            trial,
            step,
            value,
        });
    }
    if run.best.is_none_or(|b| better(opts.goal, value, b)) && !value.is_nan() {
        run.best = Some(value);
        run.series.push([run.compute_s, run.wall_s, value]);
    }
}
