//! MLflow's search syntax: run filters (`metrics.acc > 0.9 and params.lr = '0.01'`),
//! `order_by` clauses, and experiment filters and orders.
//!
//! The behaviour follows MLflow 3.x (`mlflow/utils/search_utils.py`, `SearchUtils` and
//! `SearchExperimentsUtils`) and, where its two stores differ, the SQL store, which is
//! what an MLflow server runs. A filter is clauses joined by `AND`; a clause is
//! `<identifier> <comparator> <value>`:
//!
//! | identifier                                   | comparators                          | value               |
//! |----------------------------------------------|--------------------------------------|---------------------|
//! | `metrics.k` / `metric.k`                     | `= != < <= > >=`                     | a number            |
//! | `params.k` / `param(s).k` / `parameter(s).k` | `= != LIKE ILIKE`, `IS [NOT] NULL`   | a quoted string     |
//! | `tags.k` / `tag.k`                           | `= != LIKE ILIKE`, `IS [NOT] NULL`   | a quoted string     |
//! | run text attributes (`status`, `run_id`...)  | `= != LIKE ILIKE`; `run_id [NOT] IN` | a string, or a list |
//! | `start_time`, `end_time`, `created`          | `= != < <= > >=`                     | a number            |
//!
//! A bare name, or one under `attributes.`/`attribute.`/`attr.`/`run.`, is an attribute.
//! Keys may be quoted with backticks, double or single quotes (``metrics.`my metric` ``,
//! `tags."mlflow.runName"`, `params.'lr'`); a dotted key (`tags.mlflow.runName`) also
//! works unquoted.
//! Strings take single or double quotes. Keywords are case-insensitive; entity prefixes
//! and attribute names are not (as in MLflow). A clause on a metric, param, tag or
//! attribute that the run lacks is false for every comparator (`!=` included) except
//! `IS NULL`. A NaN metric satisfies only `!=` (the SQL store's rule, and IEEE's).
//!
//! Orders: runs missing the ordered key sort last in both directions (a NaN metric sorts
//! after every number and before a missing one); then `start_time DESC` (unless ordered
//! on already) and `run_id ASC` break ties. Experiments: by default `creation_time DESC,
//! experiment_id ASC`; after given clauses, `experiment_id DESC` breaks ties (MLflow's).
//!
//! Chosen differences from MLflow, all on inputs MLflow mishandles or that this server
//! lacks:
//! - The grammar is strict: MLflow's sqlparse-based parser silently accepts a leading,
//!   trailing or doubled `AND` and two clauses with nothing between them; these are errors.
//! - Comparators are checked while parsing (MLflow parses `params.a > '1'` and fails only
//!   when matching); `NOT LIKE`, `RLIKE`, `==` and `<>` are rejected with the valid list.
//! - Quote escapes are undone: `'it''s'` and `'it\'s'` mean `it's` (MLflow tokenises them
//!   the same way but keeps both characters, so they matched `it''s`). Other backslashes
//!   are literal.
//! - An exponent may carry a `+` (`1e+6`, as JavaScript and Go print floats).
//! - A filter of only whitespace matches everything (MLflow: "Could not be parsed"), and
//!   whitespace around an `order_by` clause is ignored (MLflow refuses it).
//! - A list is quoted strings separated by commas: MLflow evaluates it as a Python tuple,
//!   so `('a' 'b')` silently meant `('ab',)`.
//! - `lifecycle_stage` is a run attribute (filter and order); MLflow leaves it to the
//!   view type.
//! - An empty key (`metrics.`), a list after `=` (`run_id = ('a')`) and `datasets.*`
//!   are errors; MLflow accepts the first two and matches nothing, and this server keeps
//!   no datasets.
//! - `run_name` reads [`RunRecord::run_name`]; `tags.mlflow.runName` reads only the tags.
//! - `_` in LIKE matches any one character, newline included (SQL's rule).
//! - A run without a start time sorts last in the `start_time DESC` tie-breaker.
//!
//! Experiments follow the SQL store where MLflow's file store differs: ids are integers
//! (an `experiment_id` value must be one, and ids order numerically), and
//! `creation_time`/`last_update_time` compare with integers only.

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

/// The longest filter string accepted, and the most bytes all `order_by` clauses may
/// hold together: a request cannot make the parser or a LIKE match do unbounded work.
pub const MAX_SEARCH_TEXT_BYTES: usize = 64 * 1024;
/// The most `order_by` clauses accepted.
pub const MAX_ORDER_BY_CLAUSES: usize = 100;

/// A filter or `order_by` that cannot be used; the message says what and where, in
/// MLflow's wording where MLflow has one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct SearchError {
    pub message: String,
}

impl SearchError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

// Text to clauses (`lexer`, `clauses`), then what a clause means: the tests shared by
// both entity kinds (`conditions`), and each kind's filters and orders.
mod clauses;
mod conditions;
mod experiments;
mod lexer;
mod runs;

pub use experiments::{
    parse_experiment_filter, parse_experiment_order, ExperimentFilter, ExperimentOrder,
};
pub use runs::{parse_run_filter, parse_run_order, RunFilter, RunOrder};

#[cfg(test)]
mod tests;
