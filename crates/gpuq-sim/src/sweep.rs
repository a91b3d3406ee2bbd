//! Sweep searchers replayed over recorded learning curves: what ASHA, random
//! search and grid search would have spent, on a virtual clock, to reach a
//! target metric, had the trials been the recorded ones.
//!
//! The searchers are `gpuq_core::sweep::Searcher`, the daemon's own; this
//! module only stands in for the trials. Trial `i` of a run gets recorded
//! curve `perm[i]`, a per-seed shuffle of the file's random draws (grid
//! points for grid search), so each seed is one possible order of the same
//! trials, and every searcher of a seed sees the same order.
//!
//! # The curves file
//!
//! JSON lines. An optional first line is a header; every other line is one
//! recorded configuration:
//!
//! ```text
//! {"metric": "val_acc", "goal": "maximize", "task": "…"}
//! {"config": {"lr": 0.01}, "curve": [[1, 0.71, 0.05], [2, 0.83, 0.05]]}
//! {"config": {"lr": 0.1}, "curve": [[1, 0.52, 0.04], [2, 0.90, 0.04]], "grid": true}
//! ```
//!
//! Each curve point is `[step, value, seconds]`: the metric after that step
//! (`null` where it was not finite: NaN ranks last) and the compute that step
//! took. Steps increase; they need not be contiguous. Lines with `"grid":
//! true` are the points of a grid, in any order, and are what grid search
//! replays; the others are random draws from the search space, replayed by
//! random search and ASHA. A file without grid lines simply has no grid row.
//! The header's `metric` and `goal` name the metric; any other header field
//! is description and ignored here.

mod replay;
mod report;
#[cfg(test)]
mod tests;

pub use replay::{replay, Hit, Run};
pub use report::{compare, Comparison, Spread, Summary};

use gpuq_core::sweep::{Goal, SearcherKind};
use serde::Serialize;
use serde_json::{Map, Value};

/// One recorded point: the metric after `step`, and what the step cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub step: u64,
    /// NaN where the recording had no finite value.
    pub value: f64,
    /// Compute of this step alone, seconds of one slot.
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Line number in the file, for messages.
    pub line: usize,
    pub config: Map<String, Value>,
    pub points: Vec<Point>,
    pub grid: bool,
}

impl Curve {
    pub fn last_step(&self) -> u64 {
        self.points.last().map_or(0, |p| p.step)
    }

    /// The value at the first recorded step at or past `step` (where a trial
    /// trained to `step` reports and stops), or None past the end.
    pub fn value_at(&self, step: u64) -> Option<f64> {
        self.points.iter().find(|p| p.step >= step).map(|p| p.value)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Curves {
    pub metric: Option<String>,
    pub goal: Option<Goal>,
    pub curves: Vec<Curve>,
}

impl Curves {
    /// The random draws (replayed by random search and ASHA).
    pub fn random(&self) -> Vec<&Curve> {
        self.curves.iter().filter(|c| !c.grid).collect()
    }

    /// The grid points (replayed by grid search).
    pub fn grid(&self) -> Vec<&Curve> {
        self.curves.iter().filter(|c| c.grid).collect()
    }
}

/// What is wrong with a curves file or the comparison asked of it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepSimError {
    /// `line` is 1-based; `field` the key at fault, e.g. `curve[3]`.
    #[error("line {line}: {field}: {why}")]
    Line {
        line: usize,
        field: String,
        why: String,
    },
    /// An option that does not fit the curves, named as on the command line.
    #[error("{option}: {why}")]
    Option { option: String, why: String },
    /// The searcher refused its spec, or an event: a bug here, not bad input.
    #[error("searcher: {0}")]
    Searcher(#[from] gpuq_core::sweep::SweepError),
}

fn line_err(line: usize, field: impl Into<String>, why: impl Into<String>) -> SweepSimError {
    SweepSimError::Line {
        line,
        field: field.into(),
        why: why.into(),
    }
}

pub(crate) fn option_err(option: &str, why: impl Into<String>) -> SweepSimError {
    SweepSimError::Option {
        option: option.into(),
        why: why.into(),
    }
}

/// `maximize` or `minimize`, as in a sweep file.
pub fn parse_goal(text: &str) -> Option<Goal> {
    match text {
        "maximize" => Some(Goal::Maximize),
        "minimize" => Some(Goal::Minimize),
        _ => None,
    }
}

pub fn goal_name(goal: Goal) -> &'static str {
    match goal {
        Goal::Maximize => "maximize",
        Goal::Minimize => "minimize",
    }
}

pub fn searcher_name(kind: SearcherKind) -> &'static str {
    match kind {
        SearcherKind::Asha => "asha",
        SearcherKind::Random => "random",
        SearcherKind::Grid => "grid",
    }
}

/// Parses a curves file (see the module documentation).
pub fn parse(text: &str) -> Result<Curves, SweepSimError> {
    let mut out = Curves::default();
    let mut first = true;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(raw).map_err(|e| {
            // serde_json appends " at line 1 column N" (its own line, always
            // 1 here); the column goes in the field instead.
            let mut why = e.to_string();
            if let Some(at) = why.rfind(" at line ") {
                why.truncate(at);
            }
            line_err(
                line,
                format!("column {}", e.column()),
                format!("not JSON: {why}"),
            )
        })?;
        let Value::Object(obj) = value else {
            return Err(line_err(line, "line", "must be a JSON object"));
        };
        let is_curve = obj.contains_key("config") || obj.contains_key("curve");
        if !is_curve && first {
            read_header(line, &obj, &mut out)?;
        } else if is_curve {
            out.curves.push(read_curve(line, obj)?);
        } else {
            return Err(line_err(
                line,
                "line",
                "a curve needs \"config\" and \"curve\" (only the first line may be a header)",
            ));
        }
        first = false;
    }
    if out.curves.is_empty() {
        return Err(line_err(
            text.lines().count().max(1),
            "file",
            "no curves: expected lines of {\"config\": {...}, \"curve\": [[step, value, seconds], ...]}",
        ));
    }
    Ok(out)
}

fn read_header(
    line: usize,
    obj: &Map<String, Value>,
    out: &mut Curves,
) -> Result<(), SweepSimError> {
    match obj.get("metric") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.metric = Some(s.clone()),
        Some(_) => return Err(line_err(line, "metric", "must be a string")),
    }
    match obj.get("goal") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.goal = Some(parse_goal(s).ok_or_else(|| {
                line_err(line, "goal", format!("{s:?}: write maximize or minimize"))
            })?)
        }
        Some(_) => return Err(line_err(line, "goal", "write maximize or minimize")),
    }
    Ok(())
}

fn read_curve(line: usize, obj: Map<String, Value>) -> Result<Curve, SweepSimError> {
    let mut config = None;
    let mut points = None;
    let mut grid = false;
    for (key, v) in obj {
        match key.as_str() {
            "config" => match v {
                Value::Object(m) => config = Some(m),
                _ => return Err(line_err(line, "config", "must be an object of parameters")),
            },
            "curve" => points = Some(read_points(line, &v)?),
            "grid" => match v {
                Value::Bool(b) => grid = b,
                _ => return Err(line_err(line, "grid", "must be true or false")),
            },
            other => {
                return Err(line_err(
                    line,
                    other,
                    "unknown field; a curve line has config, curve and grid",
                ))
            }
        }
    }
    Ok(Curve {
        line,
        config: config.ok_or_else(|| line_err(line, "config", "missing"))?,
        points: points.ok_or_else(|| line_err(line, "curve", "missing"))?,
        grid,
    })
}

fn read_points(line: usize, v: &Value) -> Result<Vec<Point>, SweepSimError> {
    let Value::Array(items) = v else {
        return Err(line_err(
            line,
            "curve",
            "must be an array of [step, value, seconds]",
        ));
    };
    if items.is_empty() {
        return Err(line_err(line, "curve", "has no points"));
    }
    let mut points: Vec<Point> = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let field = format!("curve[{j}]");
        let bad = |why: &str| line_err(line, field.clone(), why.to_string());
        let triple = match item.as_array() {
            Some(t) if t.len() == 3 => t,
            _ => return Err(bad("must be [step, value, seconds]")),
        };
        let step = triple[0]
            .as_u64()
            .filter(|s| *s >= 1)
            .ok_or_else(|| bad("step must be an integer from 1"))?;
        let value = match &triple[1] {
            Value::Null => f64::NAN,
            v => v
                .as_f64()
                .ok_or_else(|| bad("value must be a number or null"))?,
        };
        let seconds = triple[2]
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| bad("seconds must be a number of at least 0"))?;
        if let Some(prev) = points.last() {
            if step <= prev.step {
                return Err(bad(&format!(
                    "step {step} after step {}: steps must increase",
                    prev.step
                )));
            }
        }
        points.push(Point {
            step,
            value,
            seconds,
        });
    }
    Ok(points)
}

/// What to compare; everything task-specific comes from here or the file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepSimOptions {
    /// The metric value to reach: at or above it to maximize, at or below to
    /// minimize.
    pub target: f64,
    pub goal: Goal,
    /// Slots: trials that train at once (the searchers' max_concurrent).
    pub workers: u32,
    /// Trials per run for random search and ASHA; None: every random curve.
    /// Grid search always runs its whole grid.
    pub max_trials: Option<u32>,
    /// None: the shortest curve's last step.
    pub max_step: Option<u64>,
    pub min_step: u64,
    pub eta: u64,
    /// Runs per searcher, each with its own shuffle of the curves.
    pub seeds: u32,
    /// Slot-seconds every attempt (a start or a promotion) spends before its
    /// first step: process start, imports, loading the checkpoint.
    pub restart_overhead_s: f64,
    /// Stop a run once it has spent this much compute (slot-seconds).
    pub budget_s: Option<f64>,
    /// Count only results at a rung (where a trial stops and checkpoints: a
    /// model one holds) towards the target and the best value, not every
    /// reported step.
    pub rung_only: bool,
    /// Every promotion pauses and restarts the trial (paying the restart
    /// overhead), as a trial that does not ask at its rung; by default a
    /// trial promoted at once trains on in place, as the daemon runs it.
    pub pause_only: bool,
}

impl Default for SweepSimOptions {
    fn default() -> Self {
        SweepSimOptions {
            target: 0.0,
            goal: Goal::Maximize,
            workers: 1,
            max_trials: None,
            max_step: None,
            min_step: 1,
            eta: 3,
            seeds: 10,
            restart_overhead_s: 0.0,
            budget_s: None,
            rung_only: false,
            pause_only: false,
        }
    }
}

/// `a` is at least as good as `b` under `goal`; NaN is never good.
pub(crate) fn meets(goal: Goal, a: f64, b: f64) -> bool {
    match goal {
        Goal::Maximize => a >= b,
        Goal::Minimize => a <= b,
    }
}

/// `a` is strictly better than `b` under `goal` (a NaN `b` loses to any number).
pub(crate) fn better(goal: Goal, a: f64, b: f64) -> bool {
    !a.is_nan()
        && (b.is_nan()
            || match goal {
                Goal::Maximize => a > b,
                Goal::Minimize => a < b,
            })
}
