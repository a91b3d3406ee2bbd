//! Sweeps in the API: `POST /v1/sweeps`, `GET /v1/sweeps`, `GET /v1/sweeps/{id}`,
//! `POST /v1/sweeps/{id}/cancel`; and the sweep file (`gpuq sweep FILE`).

use crate::tracking::MetricValue;
use gpuq_core::sweep::{Metric, SearcherKind, SweepBudget, SweepSpec};
use gpuq_core::{JobId, JobSpec, Millis};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/sweeps`
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SweepRequest {
    /// The trials' job: every job field; its `name` names the sweep.
    pub spec: JobSpec,
    pub sweep: SweepSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<SweepBudget>,
    /// Fixes every sampled parameter (default: drawn at creation, and shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub cwd: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro: Option<crate::repro::Repro>,
}

/// What a sweep has used: finished attempts' GPU-hours and cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct SweepUsage {
    pub gpu_hours: f64,
    /// With GPU prices configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BestTrial {
    pub trial: u32,
    pub job: JobId,
    pub step: u64,
    pub value: MetricValue,
}

/// A line of `gpuq sweep ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepSummary {
    pub id: i64,
    pub name: String,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// running, done, cancelled, or budget (stopped at its budget).
    pub state: String,
    /// Why it ended, or what holds it back while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub searcher: SearcherKind,
    pub metric: Metric,
    pub created_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Trials started so far, and of them how many hold or wait for a GPU now.
    pub trial_count: u32,
    pub active: u32,
    pub max_trials: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<BestTrial>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<SweepBudget>,
    pub used: SweepUsage,
}

/// One trial in `gpuq sweep show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrialInfo {
    pub trial: u32,
    pub job: JobId,
    pub params: BTreeMap<String, serde_json::Value>,
    /// queued, running, paused (at its rung, no GPU held), completed, failed,
    /// stopped (not promoted), cancelled.
    pub state: String,
    /// Its rung (0 = the bottom) and the step it trains to there.
    pub rung: usize,
    pub rung_step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_value: Option<MetricValue>,
    /// When the last value was logged (epoch ms), where the tracking store has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<i64>,
    pub attempts: u32,
    pub gpu_hours: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// The job's reason (why it was stopped or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/sweeps/{id}`: trials best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepDetail {
    #[serde(flatten)]
    pub summary: SweepSummary,
    pub seed: u64,
    pub rungs: Vec<u64>,
    pub max_concurrent: u32,
    /// Its parent run in the tracking API, and the experiment of its trials.
    pub run_id: String,
    pub experiment_id: i64,
    pub trials: Vec<TrialInfo>,
}

/// `POST /v1/jobs/{id}/rung`: a trial that logged its rung's step asks whether
/// it trains on in place (it was promoted at once into the slot it would
/// free: no restart) or pauses (saves, exits, waits without a GPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RungAnswer {
    pub train_on: bool,
    /// The step it may now train to (its current one when it pauses).
    pub max_step: u64,
    pub reason: String,
}

/// The keys of a sweep file that are not job fields.
const SWEEP_KEYS: [&str; 5] = ["parameters", "metric", "searcher", "budget", "seed"];

/// A sweep file: job fields plus `parameters`, `metric`, `searcher`,
/// `budget` and `seed`. Trials are preemptible unless the file says
/// `preemptible: false` (they checkpoint to pause, so a preemption costs
/// them little and lets others' work in).
#[derive(Debug)]
pub struct SweepFile {
    pub spec: JobSpec,
    pub sweep: SweepSpec,
    pub budget: Option<SweepBudget>,
    pub seed: Option<u64>,
}

pub fn parse_sweep_file(text: &str) -> Result<SweepFile, String> {
    crate::spec_file::check_size_and_depth(text)?;
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    // As JSON, whose enums are maps (`{gpu_hours: 10}`), not YAML tags.
    let value = serde_json::to_value(&value)
        .map_err(|e| format!("{e}; field names must be plain strings"))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(
            "a sweep file is a mapping of fields (name, command, parameters, metric, searcher…)"
                .into(),
        );
    };
    let mut sweep = serde_json::Map::new();
    for key in SWEEP_KEYS {
        if let Some(v) = map.remove(key) {
            sweep.insert(key.into(), v);
        }
    }
    // A misspelt key (`parameter:`) is named before the "missing" it causes.
    if let Some(why) = unknown_key(&map) {
        return Err(why);
    }
    for key in ["parameters", "metric", "searcher"] {
        if !sweep.contains_key(key) {
            return Err(format!(
                "{key}: missing; a sweep file needs parameters, metric and searcher (see docs/sweeps.md)"
            ));
        }
    }
    if !map.contains_key("preemptible") {
        map.insert("preemptible".into(), true.into());
    }
    let mut spec: JobSpec = from_value(serde_json::Value::Object(map), "")?;
    // The trials' environment, read by the client (as for a job spec).
    crate::spec_file::read_env_inputs(&mut spec)?;
    spec.validate().map_err(|e| e.to_string())?;
    let budget = match sweep.remove("budget") {
        Some(b) => Some(from_value::<SweepBudget>(b, "budget")?),
        None => None,
    };
    let seed = match sweep.remove("seed") {
        Some(s) => Some(from_value::<u64>(s, "seed")?),
        None => None,
    };
    let sweep: SweepSpec = from_value(serde_json::Value::Object(sweep), "")?;
    sweep.validate().map_err(|e| e.to_string())?;
    if let Some(b) = &budget {
        b.validate().map_err(|e| e.to_string())?;
    }
    Ok(SweepFile {
        spec,
        sweep,
        budget,
        seed,
    })
}

/// The first top-level key that is neither a sweep key nor a job field, with
/// the known key it is closest to.
fn unknown_key(map: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let schema = crate::openapi::job_spec_schema();
    let job_fields: Vec<&str> = schema["properties"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let key = map.keys().find(|k| !job_fields.contains(&k.as_str()))?;
    let near = SWEEP_KEYS
        .iter()
        .copied()
        .chain(job_fields.iter().copied())
        .map(|k| (edit_distance(key, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min();
    let hint = near.map_or(String::new(), |(_, k)| format!("did you mean `{k}`? "));
    Some(format!(
        "unknown field `{key}`; {hint}a sweep file takes {} and the job's fields \
         (docs/sweeps.md, docs/job-spec.schema.json)",
        SWEEP_KEYS.join(", ")
    ))
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Deserializes a part of the file; the error names the field's path.
fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = match (prefix, path.as_str()) {
            ("", ".") => String::new(),
            ("", p) => format!("{p}: "),
            (pre, ".") => format!("{pre}: "),
            (pre, p) => format!("{pre}.{p}: "),
        };
        let msg = crate::spec_file::plain_types(&e.into_inner().to_string());
        let hint = if msg.contains("unknown field") {
            "; see docs/sweeps.md for the sweep fields and docs/job-spec.schema.json for the job's"
        } else {
            ""
        };
        format!("{at}{msg}{hint}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "name: mlp-lr\ncommand: [python, train.py]\ngpus: 1\nparameters:\n  lr: {loguniform: [1.0e-4, 1.0e-1]}\n  layers: {choice: [1, 2, 3]}\n  width: {int: [32, 512]}\n  dropout: {uniform: [0.0, 0.5]}\nmetric: {name: val_loss, goal: minimize}\nsearcher:\n  name: asha\n  max_trials: 64\n  max_concurrent: 8\n  max_step: 81\n  min_step: 1\n  eta: 3\nbudget: {gpu_hours: 10}\n";

    #[test]
    fn the_documented_file_parses_and_trials_are_preemptible_by_default() {
        let f = parse_sweep_file(FILE).unwrap();
        assert_eq!(f.spec.name.as_deref(), Some("mlp-lr"));
        assert!(f.spec.preemptible);
        assert_eq!(f.sweep.searcher.max_step, 81);
        assert_eq!(f.sweep.parameters.len(), 4);
        assert_eq!(f.budget, Some(SweepBudget::GpuHours(10.0)));
        let f = parse_sweep_file(&format!("{FILE}preemptible: false\n")).unwrap();
        assert!(!f.spec.preemptible);
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_sweep_file(&FILE.replace("eta: 3", "eta: 1")).unwrap_err();
        assert!(e.contains("searcher.eta"), "{e}");
        let e = parse_sweep_file(&FILE.replace("gpus: 1", "gpu: 1")).unwrap_err();
        assert!(e.contains("unknown field `gpu`"), "{e}");
        let e = parse_sweep_file(&FILE.replace("loguniform", "logunif")).unwrap_err();
        assert!(e.contains("parameters.lr"), "{e}");
        let e = parse_sweep_file(&FILE.replace("gpu_hours: 10", "gpu_hours: -1")).unwrap_err();
        assert!(e.contains("budget.gpu_hours"), "{e}");
        let e = parse_sweep_file(&FILE.replace("gpu_hours", "hours")).unwrap_err();
        assert!(e.starts_with("budget"), "{e}");
        let e = parse_sweep_file(&FILE.replace("parameters:", "parameter:")).unwrap_err();
        assert!(
            e.contains("unknown field `parameter`; did you mean `parameters`?"),
            "{e}"
        );
        let e = parse_sweep_file(&FILE.replace("max_trials: 64", "max_trials: -1")).unwrap_err();
        assert!(
            e.contains("searcher.max_trials") && e.contains("whole number"),
            "{e}"
        );
        let e = parse_sweep_file("name: x\ncommand: [a]\n").unwrap_err();
        assert!(e.contains("parameters: missing"), "{e}");
        for junk in ["", "[", "- a", "parameters: 3", "{{{{", "metric: [1"] {
            assert!(parse_sweep_file(junk).is_err());
        }
    }
}
