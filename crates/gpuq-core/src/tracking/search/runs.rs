//! Run filters and orders: the public API, and what each identifier means for a run.

use std::cmp::Ordering;

use super::clauses::{check_order_size, parse_clauses, parse_order_clause, quoted_list, RawClause};
use super::conditions::{
    bad_comparator, is_list_op, is_null_op, list_only_for, null_only_for_keyed, numeric_attr,
    op_among, str_test, Cmp, StrTest, KEYED_STRING_OPS, LIST_TEXT_OPS, NUMERIC_OPS, TEXT_OPS,
};
use super::lexer::{Ident, Number, Value};
use super::{RunRecord, SearchError};

// ---------------------------------------------------------------------------
// Public API: runs
// ---------------------------------------------------------------------------

/// A parsed run filter; the default matches every run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    clauses: Vec<RunCond>,
}

/// Parses a run filter; an empty or all-whitespace one matches every run.
pub fn parse_run_filter(filter: &str) -> Result<RunFilter, SearchError> {
    let clauses = parse_clauses(filter)?
        .iter()
        .map(run_cond)
        .collect::<Result<_, _>>()?;
    Ok(RunFilter { clauses })
}

impl RunFilter {
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.clauses.iter().all(|c| c.matches(run))
    }
}

/// A parsed run `order_by`, tie-breakers included; the default is MLflow's natural order.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOrder {
    keys: Vec<(RunKey, bool)>,
}

impl Default for RunOrder {
    fn default() -> Self {
        Self {
            keys: vec![
                (RunKey::Time(RunTime::StartTime), false),
                (RunKey::Text(RunText::RunId), true),
            ],
        }
    }
}

/// Parses `order_by` clauses for runs: each `<identifier> [ASC|DESC]`.
pub fn parse_run_order(order_by: &[String]) -> Result<RunOrder, SearchError> {
    check_order_size(order_by)?;
    let mut keys: Vec<(RunKey, bool)> = Vec::with_capacity(order_by.len() + 2);
    for clause in order_by {
        let (ident, ascending) = parse_order_clause(clause)?;
        let key = run_key(&ident)?;
        // MLflow's SQL store refuses a key ordered twice; its direction would be ambiguous.
        if keys.iter().any(|(k, _)| *k == key) {
            return Err(SearchError::new(format!(
                "`order_by` contains duplicate fields: {}",
                quoted_list(order_by)
            )));
        }
        keys.push((key, ascending));
    }
    let start = RunKey::Time(RunTime::StartTime);
    if !keys.iter().any(|(k, _)| *k == start) {
        keys.push((start, false));
    }
    keys.push((RunKey::Text(RunText::RunId), true));
    Ok(RunOrder { keys })
}

impl RunOrder {
    /// A total order: sorting with it never meets an inconsistency.
    pub fn compare(&self, a: &RunRecord, b: &RunRecord) -> Ordering {
        self.keys
            .iter()
            .map(|(key, ascending)| key.compare(a, b, *ascending))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

// ---------------------------------------------------------------------------
// Meaning: runs
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunText {
    RunId,
    RunName,
    Status,
    UserId,
    ArtifactUri,
    LifecycleStage,
}

impl RunText {
    fn get(self, run: &RunRecord) -> Option<&str> {
        Some(match self {
            RunText::RunId => &run.run_id,
            RunText::RunName => return run.run_name.as_deref(),
            RunText::Status => &run.status,
            RunText::UserId => &run.user,
            RunText::ArtifactUri => &run.artifact_uri,
            RunText::LifecycleStage => &run.lifecycle_stage,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunTime {
    StartTime,
    EndTime,
}

impl RunTime {
    fn get(self, run: &RunRecord) -> Option<i64> {
        match self {
            RunTime::StartTime => run.start_time,
            RunTime::EndTime => run.end_time,
        }
    }
}

enum RunAttr {
    Text(RunText),
    Time(RunTime),
}

/// The keys named in "valid keys" messages; MLflow also takes "run name", "Run name"
/// and "Run Name" in filters, and "Created" for created.
const RUN_ATTRIBUTE_KEYS: &[&str] = &[
    "artifact_uri",
    "created",
    "end_time",
    "lifecycle_stage",
    "run_id",
    "run_name",
    "start_time",
    "status",
    "user_id",
];

fn run_attr(ident: &Ident, in_filter: bool) -> Result<RunAttr, SearchError> {
    Ok(match ident.key.as_str() {
        "run_id" => RunAttr::Text(RunText::RunId),
        "run_name" => RunAttr::Text(RunText::RunName),
        "run name" | "Run name" | "Run Name" if in_filter => RunAttr::Text(RunText::RunName),
        "status" => RunAttr::Text(RunText::Status),
        "user_id" => RunAttr::Text(RunText::UserId),
        "artifact_uri" => RunAttr::Text(RunText::ArtifactUri),
        "lifecycle_stage" => RunAttr::Text(RunText::LifecycleStage),
        "start_time" | "created" | "Created" => RunAttr::Time(RunTime::StartTime),
        "end_time" => RunAttr::Time(RunTime::EndTime),
        key => {
            return Err(SearchError::new(format!(
                "Invalid attribute key '{key}' specified. Valid keys are {}",
                quoted_list(RUN_ATTRIBUTE_KEYS)
            )))
        }
    })
}

enum RunEntity {
    Metric,
    Param,
    Tag,
    Attribute,
}

fn run_entity(ident: &Ident) -> Result<RunEntity, SearchError> {
    Ok(match ident.prefix.as_deref() {
        None => RunEntity::Attribute,
        Some("metric" | "metrics") => RunEntity::Metric,
        Some("parameter" | "parameters" | "param" | "params") => RunEntity::Param,
        Some("tag" | "tags") => RunEntity::Tag,
        Some("attribute" | "attributes" | "attr" | "run") => RunEntity::Attribute,
        Some("dataset" | "datasets") => {
            return Err(SearchError::new(format!(
                "Invalid identifier '{}': searching runs by dataset is not supported by this server",
                ident.text
            )))
        }
        Some(other) => {
            return Err(SearchError::new(format!(
                "Invalid entity type '{other}'. Valid values are ['metric', 'parameter', 'tag', 'attribute']"
            )))
        }
    })
}

#[derive(Debug, Clone, PartialEq)]
enum RunCond {
    Metric {
        key: String,
        cmp: Cmp,
        value: f64,
    },
    Param {
        key: String,
        test: StrTest,
    },
    Tag {
        key: String,
        test: StrTest,
    },
    Text {
        attr: RunText,
        test: StrTest,
    },
    Time {
        attr: RunTime,
        cmp: Cmp,
        value: Number,
    },
}

impl RunCond {
    fn matches(&self, run: &RunRecord) -> bool {
        match self {
            RunCond::Metric { key, cmp, value } => {
                run.metrics.get(key).is_some_and(|&v| cmp.test(v, *value))
            }
            RunCond::Param { key, test } => test.holds(run.params.get(key).map(String::as_str)),
            RunCond::Tag { key, test } => test.holds(run.tags.get(key).map(String::as_str)),
            RunCond::Text { attr, test } => test.holds(attr.get(run)),
            RunCond::Time { attr, cmp, value } => attr.get(run).is_some_and(|t| match *value {
                Number::Int(i) => cmp.test(t, i),
                Number::Float(f) => cmp.test(t as f64, f),
            }),
        }
    }
}

fn run_cond(c: &RawClause) -> Result<RunCond, SearchError> {
    let key = &c.ident.key;
    match run_entity(&c.ident)? {
        RunEntity::Metric => {
            if is_null_op(c) {
                return Err(null_only_for_keyed(c, "metric"));
            }
            let what = format!("metric '{key}'");
            let cmp = Cmp::from_op(op_among(c, &what, NUMERIC_OPS)?)
                .ok_or_else(|| bad_comparator(c, &what, NUMERIC_OPS))?;
            let value = match c.value {
                Some(Value::Num(n)) => n.as_f64(),
                _ => {
                    return Err(SearchError::new(format!(
                        "Expected numeric value type for metric. Found {}",
                        c.value_text
                    )))
                }
            };
            Ok(RunCond::Metric {
                key: key.clone(),
                cmp,
                value,
            })
        }
        RunEntity::Param => Ok(RunCond::Param {
            key: key.clone(),
            test: str_test(c, &format!("param '{key}'"), KEYED_STRING_OPS)?,
        }),
        RunEntity::Tag => Ok(RunCond::Tag {
            key: key.clone(),
            test: str_test(c, &format!("tag '{key}'"), KEYED_STRING_OPS)?,
        }),
        RunEntity::Attribute => {
            let attr = run_attr(&c.ident, true)?;
            if is_null_op(c) {
                return Err(null_only_for_keyed(c, "attribute"));
            }
            match attr {
                RunAttr::Time(attr) => {
                    let (cmp, value) = numeric_attr(c, key)?;
                    Ok(RunCond::Time { attr, cmp, value })
                }
                RunAttr::Text(attr) => {
                    if is_list_op(c) && attr != RunText::RunId {
                        return Err(list_only_for("run_id"));
                    }
                    let valid = if attr == RunText::RunId {
                        LIST_TEXT_OPS
                    } else {
                        TEXT_OPS
                    };
                    let test = str_test(c, &format!("string attribute '{key}'"), valid)?;
                    Ok(RunCond::Text { attr, test })
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum RunKey {
    Metric(String),
    Param(String),
    Tag(String),
    Text(RunText),
    Time(RunTime),
}

fn run_key(ident: &Ident) -> Result<RunKey, SearchError> {
    let key = ident.key.clone();
    Ok(match run_entity(ident)? {
        RunEntity::Metric => RunKey::Metric(key),
        RunEntity::Param => RunKey::Param(key),
        RunEntity::Tag => RunKey::Tag(key),
        RunEntity::Attribute => match run_attr(ident, false)? {
            RunAttr::Text(t) => RunKey::Text(t),
            RunAttr::Time(t) => RunKey::Time(t),
        },
    })
}

impl RunKey {
    fn compare(&self, a: &RunRecord, b: &RunRecord, ascending: bool) -> Ordering {
        match self {
            RunKey::Metric(k) => compare_metric(
                a.metrics.get(k).copied(),
                b.metrics.get(k).copied(),
                ascending,
            ),
            RunKey::Param(k) => present_first(a.params.get(k), b.params.get(k), ascending),
            RunKey::Tag(k) => present_first(a.tags.get(k), b.tags.get(k), ascending),
            RunKey::Text(t) => present_first(t.get(a), t.get(b), ascending),
            RunKey::Time(t) => present_first(t.get(a), t.get(b), ascending),
        }
    }
}

/// Present values in the asked direction, then missing ones, whichever the direction
/// (MLflow's NULLS LAST).
fn present_first<T: Ord>(a: Option<T>, b: Option<T>, ascending: bool) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) if ascending => x.cmp(&y),
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Numbers in the asked direction, then NaNs, then runs without the metric (the SQL
/// store's order in both directions).
fn compare_metric(a: Option<f64>, b: Option<f64>, ascending: bool) -> Ordering {
    let rank = |v: Option<f64>| match v {
        Some(x) if !x.is_nan() => 0,
        Some(_) => 1,
        None => 2,
    };
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Some(x), Some(y)) => {
            // Equal ranks of 0: neither is NaN, so partial_cmp answers.
            let o = x.partial_cmp(&y).unwrap_or(Ordering::Equal);
            if ascending {
                o
            } else {
                o.reverse()
            }
        }
        _ => Ordering::Equal,
    })
}
