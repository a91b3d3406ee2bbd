//! `gpuq sim --sweep CURVES`: the sweep searchers (ASHA, random, grid) replayed
//! over recorded learning curves, side by side (`gpuq_sim::sweep`).

use super::super::{CliError, CmdResult};
use gpuq_sim::sweep::{compare, parse, parse_goal, SweepSimOptions};
use std::path::Path;

#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Sweep replay (--sweep)")]
pub struct SweepArgs {
    /// The metric value to reach (at or above it to maximize, at or below to minimize).
    #[arg(long, requires = "sweep")]
    target: Option<f64>,
    /// maximize or minimize; default: the curves file's header.
    #[arg(long, requires = "sweep")]
    goal: Option<String>,
    /// Trials that train at once (slots).
    #[arg(long, default_value_t = 1, requires = "sweep")]
    workers: u32,
    /// Trials per run for random search and ASHA (default: every random curve in the file).
    #[arg(long, requires = "sweep")]
    max_trials: Option<u32>,
    /// ASHA's bottom rung.
    #[arg(long, default_value_t = 1, requires = "sweep")]
    min_step: u64,
    /// The top rung: the step every random and grid trial trains to (default: the shortest curve's last step).
    #[arg(long, requires = "sweep")]
    max_step: Option<u64>,
    /// ASHA's reduction factor.
    #[arg(long, default_value_t = 3, requires = "sweep")]
    eta: u64,
    /// Runs per searcher, each with its own shuffle of the curves.
    #[arg(long, default_value_t = 10, requires = "sweep")]
    seeds: u32,
    /// Seconds each start or promotion costs before its first step (process start, loading the checkpoint).
    #[arg(long, default_value_t = 0.0, requires = "sweep")]
    restart_overhead: f64,
    /// Stop each run after this much compute (slot-seconds).
    #[arg(long, requires = "sweep")]
    budget: Option<f64>,
    /// Count only results at a rung (a checkpointed model) towards the target and the best, not every reported step.
    #[arg(long, requires = "sweep")]
    rung_only: bool,
    /// Every promotion pauses and restarts the trial; by default a trial promoted at once trains on in place, as the daemon runs it.
    #[arg(long, requires = "sweep")]
    pause_only: bool,
}

pub fn run(path: &Path, args: &SweepArgs, json: bool) -> CmdResult {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::usage(format!(
            "--sweep {name}: {}",
            gpuq_sim::trace::io_reason(&e)
        ))
    })?;
    let curves = parse(&text).map_err(|e| CliError::usage(format!("--sweep {name}: {e}")))?;
    let target = args.target.ok_or_else(|| {
        CliError::usage("--sweep needs --target VALUE: the metric value to reach")
    })?;
    let goal = match &args.goal {
        Some(g) => parse_goal(g)
            .ok_or_else(|| CliError::usage(format!("--goal {g:?}: write maximize or minimize")))?,
        None => curves.goal.ok_or_else(|| {
            CliError::usage(format!(
                "--sweep {name}: the header names no goal; give --goal maximize or minimize"
            ))
        })?,
    };
    let opts = SweepSimOptions {
        target,
        goal,
        workers: args.workers,
        max_trials: args.max_trials,
        max_step: args.max_step,
        min_step: args.min_step,
        eta: args.eta,
        seeds: args.seeds,
        restart_overhead_s: args.restart_overhead,
        budget_s: args.budget,
        rung_only: args.rung_only,
        pause_only: args.pause_only,
    };
    let report = compare(&curves, &opts).map_err(|e| CliError::usage(e.to_string()))?;
    if json {
        crate::cli::output::print_json(&report);
    } else {
        out!("{report}");
    }
    Ok(0)
}
