//! Hyperparameter sweeps: the sweep file's types, sampling, and the pure
//! searchers (grid, random, ASHA) that decide which trial to start, promote or
//! stop next.
//!
//! Like the scheduler, nothing here does IO or reads the clock: a searcher is
//! a state machine fed with trial events, and the same spec, seed and events
//! always give the same decisions. Randomness comes from a SplitMix64
//! generator seeded from the sweep seed, so a sweep can be replayed exactly.

mod sample;
mod searcher;
#[cfg(test)]
mod tests;

pub use sample::{grid_points, grid_size, sample};
pub use searcher::{Decision, Searcher, Trial, TrialEnd, TrialId, TrialState};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A sweep file: what to vary, what to optimise, and how to search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Keyed by name; a BTreeMap so sampling and the grid order are stable.
    pub parameters: BTreeMap<String, Parameter>,
    pub metric: Metric,
    pub searcher: SearcherSpec,
}

/// One parameter's search space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Parameter {
    /// Log-spaced real in [lo, hi): learning rates, weight decay.
    LogUniform(f64, f64),
    /// Real in [lo, hi).
    Uniform(f64, f64),
    /// Integer in [lo, hi], both ends included.
    Int(i64, i64),
    /// One of the values, drawn at random.
    Choice(Vec<serde_json::Value>),
    /// Every value in turn (grid search); a random one in random search.
    Grid(Vec<serde_json::Value>),
}

/// The metric the trials report and the searcher ranks by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    pub name: String,
    pub goal: Goal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    Minimize,
    Maximize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearcherKind {
    Grid,
    Random,
    Asha,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearcherSpec {
    pub name: SearcherKind,
    pub max_trials: u32,
    #[serde(default = "default_concurrent")]
    pub max_concurrent: u32,
    /// The step a trial trains to at the top rung (every trial, for grid and
    /// random).
    pub max_step: u64,
    /// ASHA's bottom rung.
    #[serde(default = "default_min_step")]
    pub min_step: u64,
    /// ASHA's reduction factor: the top 1/eta of a rung is promoted.
    #[serde(default = "default_eta")]
    pub eta: u64,
}

fn default_concurrent() -> u32 {
    1
}
fn default_min_step() -> u64 {
    1
}
fn default_eta() -> u64 {
    3
}

/// The most a sweep may use, by worst case: no trial starts or is promoted
/// that could take the sweep past it. YAML `budget: {gpu_hours: 10}` or
/// `budget: {dollars: 25}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SweepBudget {
    GpuHours(f64),
    Dollars(f64),
}

impl SweepBudget {
    pub fn validate(&self) -> Result<(), SweepError> {
        let (field, v) = match self {
            SweepBudget::GpuHours(v) => ("budget.gpu_hours", *v),
            SweepBudget::Dollars(v) => ("budget.dollars", *v),
        };
        if !v.is_finite() || v <= 0.0 {
            return Err(invalid(field, format!("must be a number above 0, not {v}")));
        }
        Ok(())
    }
}

impl fmt::Display for SweepBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SweepBudget::GpuHours(v) => write!(f, "{v} GPU-hours"),
            SweepBudget::Dollars(v) => write!(f, "${v:.2}"),
        }
    }
}

/// How many more trial attempts fit in a budget by worst case: `left` is the
/// budget less what was used and what running attempts could still use;
/// `worst` is what one attempt could use (its GPUs times its time limit).
pub fn attempts_within(left: f64, worst: f64) -> u32 {
    if left.is_nan() || worst.is_nan() || left <= 0.0 || worst <= 0.0 {
        return 0;
    }
    // A hair of slack so a budget of exactly n attempts admits n despite rounding.
    (left / worst + 1e-9).floor().min(f64::from(u32::MAX)) as u32
}

/// A sweep file that cannot run, or an event the searcher cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// `field` is the path in the sweep file, e.g. `parameters.lr.loguniform`.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("trial {0} is not part of this sweep")]
    UnknownTrial(TrialId),
    /// An event for a trial that is not running (a report after it paused or
    /// ended): a runner bug or a late message, refused rather than guessed at.
    #[error("trial {trial} is {state:?}, not running, so it cannot report or end now")]
    NotRunning { trial: TrialId, state: TrialState },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> SweepError {
    SweepError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

impl Parameter {
    /// The key in the sweep file, for error messages.
    fn key(&self) -> &'static str {
        match self {
            Parameter::LogUniform(..) => "loguniform",
            Parameter::Uniform(..) => "uniform",
            Parameter::Int(..) => "int",
            Parameter::Choice(_) => "choice",
            Parameter::Grid(_) => "grid",
        }
    }

    /// `name` is the parameter's name, for the field path.
    pub fn validate(&self, name: &str) -> Result<(), SweepError> {
        let field = format!("parameters.{name}.{}", self.key());
        match self {
            Parameter::LogUniform(lo, hi) | Parameter::Uniform(lo, hi) => {
                if !lo.is_finite() || !hi.is_finite() {
                    return Err(invalid(field, "both ends must be finite numbers"));
                }
                if matches!(self, Parameter::LogUniform(..)) && *lo <= 0.0 {
                    return Err(invalid(
                        field,
                        "the low end must be above 0 (log spacing); use uniform for a range from 0",
                    ));
                }
                if lo >= hi {
                    return Err(invalid(
                        field,
                        format!("the low end ({lo}) must be below the high end ({hi}); write [low, high]"),
                    ));
                }
            }
            Parameter::Int(lo, hi) => {
                if lo >= hi {
                    return Err(invalid(
                        field,
                        format!("the low end ({lo}) must be below the high end ({hi}); write [low, high], both included; use choice for a single value"),
                    ));
                }
            }
            Parameter::Choice(values) | Parameter::Grid(values) => {
                if values.is_empty() {
                    return Err(invalid(field, "needs at least one value"));
                }
            }
        }
        Ok(())
    }
}

/// The most trials one sweep may start, and run at once: the searcher's
/// state (every trial's params and results) is stored after each decision.
pub const MAX_TRIALS: u32 = 10_000;
pub const MAX_CONCURRENT: u32 = 1_000;

impl SearcherSpec {
    pub fn validate(&self) -> Result<(), SweepError> {
        if self.max_trials == 0 || self.max_trials > MAX_TRIALS {
            return Err(invalid(
                "searcher.max_trials",
                format!("must be 1 to {MAX_TRIALS}, not {}", self.max_trials),
            ));
        }
        if self.max_concurrent == 0 || self.max_concurrent > MAX_CONCURRENT {
            return Err(invalid(
                "searcher.max_concurrent",
                format!("must be 1 to {MAX_CONCURRENT}, not {}", self.max_concurrent),
            ));
        }
        if self.max_step == 0 {
            return Err(invalid("searcher.max_step", "must be at least 1"));
        }
        if self.name == SearcherKind::Asha {
            if self.eta < 2 {
                return Err(invalid("searcher.eta", "must be at least 2"));
            }
            if self.min_step == 0 {
                return Err(invalid("searcher.min_step", "must be at least 1"));
            }
            if self.min_step > self.max_step {
                return Err(invalid(
                    "searcher.min_step",
                    format!(
                        "must not be above searcher.max_step ({}); lower it or raise max_step",
                        self.max_step
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The steps at which ASHA ranks trials: min_step·eta^k below max_step,
    /// then max_step itself. Grid and random have one rung, max_step.
    pub fn rungs(&self) -> Vec<u64> {
        if self.name != SearcherKind::Asha {
            return vec![self.max_step];
        }
        let mut rungs = Vec::new();
        let mut step = self.min_step.max(1);
        while step < self.max_step {
            rungs.push(step);
            step = match step.checked_mul(self.eta.max(2)) {
                Some(s) => s,
                None => break,
            };
        }
        rungs.push(self.max_step);
        rungs
    }
}

impl SweepSpec {
    pub fn validate(&self) -> Result<(), SweepError> {
        for (name, p) in &self.parameters {
            p.validate(name)?;
        }
        if self.metric.name.trim().is_empty() {
            return Err(invalid(
                "metric.name",
                "must name the metric the trials report, e.g. val_loss",
            ));
        }
        self.searcher.validate()?;
        if self.searcher.name == SearcherKind::Grid {
            if !self
                .parameters
                .values()
                .any(|p| matches!(p, Parameter::Grid(_)))
            {
                return Err(invalid(
                    "parameters",
                    "a grid search needs at least one grid parameter, e.g. batch: {grid: [16, 32]}; or use searcher.name: random",
                ));
            }
            match grid_size(&self.parameters) {
                Some(n) if n <= u64::from(self.searcher.max_trials) => {}
                Some(n) => {
                    return Err(invalid(
                        "searcher.max_trials",
                        format!(
                            "the grid has {n} points but max_trials is {}; raise max_trials to {n} or shrink the grid",
                            self.searcher.max_trials
                        ),
                    ))
                }
                None => return Err(invalid("parameters", "the grid is too large to enumerate")),
            }
        }
        Ok(())
    }
}
