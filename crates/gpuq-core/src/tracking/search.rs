//! MLflow's search syntax: run filters (`metrics.acc > 0.9 and params.lr = '0.01'`),
//! `order_by` clauses, and experiment filters.
//!
//! Filled in by the search work; the types here are the contract the server uses.

use std::collections::BTreeMap;

/// What a run filter and an ordering look at: one run, with each metric's latest value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunRecord {
    pub run_id: String,
    pub run_name: Option<String>,
    pub experiment_id: String,
    pub user: String,
    /// SCHEDULED, RUNNING, FINISHED, FAILED, KILLED.
    pub status: String,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub artifact_uri: String,
    /// `active` or `deleted`.
    pub lifecycle_stage: String,
    pub params: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub metrics: BTreeMap<String, f64>,
}

/// What an experiment filter and ordering look at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExperimentRecord {
    pub experiment_id: String,
    pub name: String,
    pub lifecycle_stage: String,
    pub creation_time: i64,
    pub last_update_time: i64,
    pub tags: BTreeMap<String, String>,
}

// Placeholder until the search parser lands: accepts only an empty filter and no ordering.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct SearchError {
    pub message: String,
}
pub struct RunFilter;
pub struct RunOrder;
pub struct ExperimentFilter;
pub struct ExperimentOrder;
fn unsupported(what: &str) -> SearchError {
    SearchError {
        message: format!("{what} is not supported yet"),
    }
}
pub fn parse_run_filter(f: &str) -> Result<RunFilter, SearchError> {
    if f.trim().is_empty() {
        Ok(RunFilter)
    } else {
        Err(unsupported("a filter"))
    }
}
impl RunFilter {
    pub fn matches(&self, _: &RunRecord) -> bool {
        true
    }
}
pub fn parse_run_order(o: &[String]) -> Result<RunOrder, SearchError> {
    if o.is_empty() {
        Ok(RunOrder)
    } else {
        Err(unsupported("order_by"))
    }
}
impl RunOrder {
    pub fn compare(&self, a: &RunRecord, b: &RunRecord) -> std::cmp::Ordering {
        b.start_time
            .cmp(&a.start_time)
            .then(a.run_id.cmp(&b.run_id))
    }
}
pub fn parse_experiment_filter(f: &str) -> Result<ExperimentFilter, SearchError> {
    if f.trim().is_empty() {
        Ok(ExperimentFilter)
    } else {
        Err(unsupported("a filter"))
    }
}
impl ExperimentFilter {
    pub fn matches(&self, _: &ExperimentRecord) -> bool {
        true
    }
}
pub fn parse_experiment_order(o: &[String]) -> Result<ExperimentOrder, SearchError> {
    if o.is_empty() {
        Ok(ExperimentOrder)
    } else {
        Err(unsupported("order_by"))
    }
}
impl ExperimentOrder {
    pub fn compare(&self, a: &ExperimentRecord, b: &ExperimentRecord) -> std::cmp::Ordering {
        b.creation_time.cmp(&a.creation_time)
    }
}
