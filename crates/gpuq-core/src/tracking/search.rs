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
