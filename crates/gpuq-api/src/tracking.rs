//! Experiment tracking as gpuq's own API shows it (`gpuq metrics`, `gpuq compare`,
//! the dashboard). The MLflow-compatible API under `/api/2.0/mlflow/` serves the
//! same store in MLflow's shapes.

use gpuq_core::JobId;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// A metric value that may be NaN or infinite. JSON has no such numbers, so
/// they travel as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (as
/// MLflow's JSON does); finite values are plain numbers.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MetricValue(pub f64);

impl Serialize for MetricValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f64::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f64::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f64(v)
        }
    }
}

impl<'de> Deserialize<'de> for MetricValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(v) => Ok(MetricValue(v)),
            Raw::Text(t) => parse_special(&t).map(MetricValue).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{t:?} is not a number (use a JSON number, \"NaN\", \"Infinity\" or \"-Infinity\")"
                ))
            }),
        }
    }
}

/// The non-finite spellings MLflow's JSON uses, and numbers written as strings.
pub fn parse_special(t: &str) -> Option<f64> {
    match t {
        "NaN" | "nan" => Some(f64::NAN),
        "Infinity" | "inf" | "+Infinity" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        other => other.trim().parse::<f64>().ok(),
    }
}

impl JsonSchema for MetricValue {
    fn schema_name() -> String {
        "MetricValue".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            metadata: Some(Box::new(schemars::schema::Metadata {
                description: Some("a number, or \"NaN\", \"Infinity\", \"-Infinity\"".into()),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

/// One point of a metric's history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MetricPoint {
    pub step: i64,
    pub value: MetricValue,
    /// Epoch milliseconds.
    pub timestamp: i64,
}

/// One metric of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MetricSeries {
    pub key: String,
    /// Points recorded.
    pub count: u64,
    /// The value at the highest step (the latest at that step).
    pub latest: MetricPoint,
    /// The history ordered by step, at most `max_points` of it: when there are
    /// more, each bucket of consecutive points is shown by its lowest and highest value.
    pub points: Vec<MetricPoint>,
    /// True when `points` is a downsampled view, not every point.
    pub downsampled: bool,
}

/// `GET /v1/jobs/{id}/metrics?key=K&max_points=N`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobMetrics {
    pub job: JobId,
    pub run_id: String,
    pub series: Vec<MetricSeries>,
    /// Points not stored because the job went over a limit, per reason
    /// (`rate limit`, `points limit`, `keys limit`, `disk reserve`); absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped: BTreeMap<String, u64>,
}

/// `GET /v1/jobs/{id}/run`: a job's tracked run, for `gpuq compare`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunSummary {
    pub run_id: String,
    pub job: Option<JobId>,
    pub name: Option<String>,
    pub experiment_id: String,
    pub experiment: String,
    pub user: String,
    /// MLflow's run status: SCHEDULED, RUNNING, FINISHED, FAILED, KILLED.
    pub status: String,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub params: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    /// Each metric's latest value.
    pub metrics: BTreeMap<String, MetricPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_round_trip_as_strings() {
        for v in [1.5, -0.0, f64::INFINITY, f64::NEG_INFINITY] {
            let s = serde_json::to_string(&MetricValue(v)).unwrap();
            let back: MetricValue = serde_json::from_str(&s).unwrap();
            assert_eq!(back.0.to_bits(), v.to_bits(), "{s}");
        }
        let nan = serde_json::to_string(&MetricValue(f64::NAN)).unwrap();
        assert_eq!(nan, "\"NaN\"");
        assert!(serde_json::from_str::<MetricValue>(&nan)
            .unwrap()
            .0
            .is_nan());
        assert_eq!(
            serde_json::from_str::<MetricValue>("\"2.5\"").unwrap().0,
            2.5
        );
        let err = serde_json::from_str::<MetricValue>("\"fast\"").unwrap_err();
        assert!(err.to_string().contains("not a number"), "{err}");
    }
}
