//! Experiment filters and orders: the public API, and what each identifier means for an
//! experiment.

use std::cmp::Ordering;

use super::clauses::{check_order_size, parse_clauses, parse_order_clause, quoted_list, RawClause};
use super::conditions::{
    bad_comparator, is_list_op, is_null_op, list_only_for, numeric_attr, str_test, Cmp, StrTest,
    ID_OPS, KEYED_STRING_OPS, TEXT_OPS,
};
use super::lexer::{Ident, Number};
use super::{ExperimentRecord, SearchError};

// ---------------------------------------------------------------------------
// Public API: experiments
// ---------------------------------------------------------------------------

/// A parsed experiment filter; the default matches every experiment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExperimentFilter {
    clauses: Vec<ExpCond>,
}

/// Parses an experiment filter: `name`, `experiment_id`, `creation_time`,
/// `last_update_time` and `tags.k`; empty or all-whitespace matches every experiment.
pub fn parse_experiment_filter(filter: &str) -> Result<ExperimentFilter, SearchError> {
    let clauses = parse_clauses(filter)?
        .iter()
        .map(exp_cond)
        .collect::<Result<_, _>>()?;
    Ok(ExperimentFilter { clauses })
}

impl ExperimentFilter {
    pub fn matches(&self, e: &ExperimentRecord) -> bool {
        self.clauses.iter().all(|c| c.matches(e))
    }
}

/// A parsed experiment `order_by`, tie-breaker included.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentOrder {
    keys: Vec<(ExpKey, bool)>,
}

impl Default for ExperimentOrder {
    fn default() -> Self {
        Self {
            keys: vec![(ExpKey::CreationTime, false), (ExpKey::Id, true)],
        }
    }
}

/// Parses `order_by` clauses for experiments: `name`, `experiment_id`, `creation_time`,
/// `last_update_time`, each with an optional ASC or DESC.
pub fn parse_experiment_order(order_by: &[String]) -> Result<ExperimentOrder, SearchError> {
    check_order_size(order_by)?;
    if order_by.is_empty() {
        return Ok(ExperimentOrder::default());
    }
    let mut keys = Vec::with_capacity(order_by.len() + 1);
    for clause in order_by {
        let (ident, ascending) = parse_order_clause(clause)?;
        keys.push((exp_key(&ident)?, ascending));
    }
    // MLflow's tie-breaker after explicit clauses is experiment_id descending.
    if !keys.iter().any(|(k, _)| *k == ExpKey::Id) {
        keys.push((ExpKey::Id, false));
    }
    Ok(ExperimentOrder { keys })
}

impl ExperimentOrder {
    /// A total order: sorting with it never meets an inconsistency.
    pub fn compare(&self, a: &ExperimentRecord, b: &ExperimentRecord) -> Ordering {
        self.keys
            .iter()
            .map(|(key, ascending)| key.compare(a, b, *ascending))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

// ---------------------------------------------------------------------------
// Meaning: experiments
// ---------------------------------------------------------------------------

const EXPERIMENT_ATTRIBUTE_KEYS: &[&str] =
    &["creation_time", "experiment_id", "last_update_time", "name"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpTime {
    Creation,
    LastUpdate,
}

impl ExpTime {
    fn get(self, e: &ExperimentRecord) -> i64 {
        match self {
            ExpTime::Creation => e.creation_time,
            ExpTime::LastUpdate => e.last_update_time,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum IdTest {
    Eq(i64),
    Ne(i64),
    In(Vec<i64>),
    NotIn(Vec<i64>),
}

#[derive(Debug, Clone, PartialEq)]
enum ExpCond {
    Name(StrTest),
    Id(IdTest),
    Time { attr: ExpTime, cmp: Cmp, value: i64 },
    Tag { key: String, test: StrTest },
}

/// The server's experiment ids are integers (as in MLflow's SQL store).
fn experiment_id_number(id: &str) -> Option<i64> {
    id.trim().parse().ok()
}

impl ExpCond {
    fn matches(&self, e: &ExperimentRecord) -> bool {
        match self {
            ExpCond::Name(test) => test.holds(Some(&e.name)),
            ExpCond::Id(test) => {
                let id = experiment_id_number(&e.experiment_id);
                match test {
                    IdTest::Eq(v) => id == Some(*v),
                    IdTest::Ne(v) => id != Some(*v),
                    IdTest::In(vs) => id.is_some_and(|id| vs.contains(&id)),
                    IdTest::NotIn(vs) => !id.is_some_and(|id| vs.contains(&id)),
                }
            }
            ExpCond::Time { attr, cmp, value } => cmp.test(attr.get(e), *value),
            ExpCond::Tag { key, test } => test.holds(e.tags.get(key).map(String::as_str)),
        }
    }
}

enum ExpEntity {
    Attribute,
    Tag,
}

fn exp_entity(ident: &Ident) -> Result<ExpEntity, SearchError> {
    // MLflow takes only these three prefixes for experiments.
    match ident.prefix.as_deref() {
        None | Some("attribute") => Ok(ExpEntity::Attribute),
        Some("tag" | "tags") => Ok(ExpEntity::Tag),
        Some(other) => Err(SearchError::new(format!(
            "Invalid entity type '{other}'. Valid entity types are ('attribute', 'tag', 'tags')"
        ))),
    }
}

fn unknown_exp_attr(key: &str) -> SearchError {
    SearchError::new(format!(
        "Invalid attribute key '{key}' specified. Valid keys are {}",
        quoted_list(EXPERIMENT_ATTRIBUTE_KEYS)
    ))
}

fn exp_cond(c: &RawClause) -> Result<ExpCond, SearchError> {
    let key = c.ident.key.as_str();
    if let ExpEntity::Tag = exp_entity(&c.ident)? {
        return Ok(ExpCond::Tag {
            key: key.to_string(),
            test: str_test(c, &format!("tag '{key}'"), KEYED_STRING_OPS)?,
        });
    }
    if !EXPERIMENT_ATTRIBUTE_KEYS.contains(&key) {
        return Err(unknown_exp_attr(key));
    }
    if is_null_op(c) {
        return Err(SearchError::new(format!(
            "IS NULL / IS NOT NULL is only supported for tags, not for attribute '{key}'"
        )));
    }
    if is_list_op(c) && key != "experiment_id" {
        return Err(list_only_for("experiment_id"));
    }
    match key {
        "name" => Ok(ExpCond::Name(str_test(
            c,
            "string attribute 'name'",
            TEXT_OPS,
        )?)),
        "experiment_id" => {
            let id = |s: &String| {
                experiment_id_number(s).ok_or_else(|| {
                    SearchError::new(format!(
                        "Invalid experiment ID '{s}'. Experiment ID must be a valid integer."
                    ))
                })
            };
            let ids = |v: &Vec<String>| v.iter().map(id).collect::<Result<Vec<_>, _>>();
            Ok(ExpCond::Id(
                match str_test(c, "attribute 'experiment_id'", ID_OPS)? {
                    StrTest::Eq(s) => IdTest::Eq(id(&s)?),
                    StrTest::Ne(s) => IdTest::Ne(id(&s)?),
                    StrTest::In(v) => IdTest::In(ids(&v)?),
                    StrTest::NotIn(v) => IdTest::NotIn(ids(&v)?),
                    _ => return Err(bad_comparator(c, "attribute 'experiment_id'", ID_OPS)),
                },
            ))
        }
        _ => {
            let attr = if key == "creation_time" {
                ExpTime::Creation
            } else {
                ExpTime::LastUpdate
            };
            let (cmp, value) = numeric_attr(c, key)?;
            // The SQL store compares with an integer column and refuses fractions.
            let Number::Int(value) = value else {
                return Err(SearchError::new(format!(
                    "Invalid value for numeric attribute '{key}': '{}'",
                    c.value_text
                )));
            };
            Ok(ExpCond::Time { attr, cmp, value })
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpKey {
    Name,
    Id,
    CreationTime,
    LastUpdateTime,
}

fn exp_key(ident: &Ident) -> Result<ExpKey, SearchError> {
    if let ExpEntity::Tag = exp_entity(ident)? {
        return Err(SearchError::new(format!(
            "Invalid order_by entity: tag (in '{}'); experiments can be ordered by {}",
            ident.text,
            quoted_list(EXPERIMENT_ATTRIBUTE_KEYS)
        )));
    }
    Ok(match ident.key.as_str() {
        "name" => ExpKey::Name,
        "experiment_id" => ExpKey::Id,
        "creation_time" => ExpKey::CreationTime,
        "last_update_time" => ExpKey::LastUpdateTime,
        key => return Err(unknown_exp_attr(key)),
    })
}

impl ExpKey {
    fn compare(self, a: &ExperimentRecord, b: &ExperimentRecord, ascending: bool) -> Ordering {
        let o = match self {
            ExpKey::Name => a.name.cmp(&b.name),
            ExpKey::Id => compare_experiment_ids(&a.experiment_id, &b.experiment_id),
            ExpKey::CreationTime => a.creation_time.cmp(&b.creation_time),
            ExpKey::LastUpdateTime => a.last_update_time.cmp(&b.last_update_time),
        };
        if ascending {
            o
        } else {
            o.reverse()
        }
    }
}

/// Numerically (the ids are integers), then, for totality, the text: ids that are not
/// numbers after all those that are.
fn compare_experiment_ids(a: &str, b: &str) -> Ordering {
    match (experiment_id_number(a), experiment_id_number(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}
