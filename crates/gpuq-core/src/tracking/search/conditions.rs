//! Meaning: shared pieces. Comparisons, string tests (SQL LIKE included), and the checks
//! that turn a clause into one, for runs and experiments alike.

use super::clauses::{quoted_list, RawClause};
use super::lexer::{Number, Op, Value};
use super::SearchError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub(super) fn from_op(op: Op) -> Option<Cmp> {
        Some(match op {
            Op::Eq => Cmp::Eq,
            Op::Ne => Cmp::Ne,
            Op::Lt => Cmp::Lt,
            Op::Le => Cmp::Le,
            Op::Gt => Cmp::Gt,
            Op::Ge => Cmp::Ge,
            _ => return None,
        })
    }

    /// With floats, a NaN side makes every comparison false but `!=`.
    pub(super) fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

pub(super) const NUMERIC_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge];
pub(super) const KEYED_STRING_OPS: &[Op] = &[
    Op::Eq,
    Op::Ne,
    Op::Like,
    Op::ILike,
    Op::IsNull,
    Op::IsNotNull,
];
pub(super) const TEXT_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Like, Op::ILike];
pub(super) const LIST_TEXT_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Like, Op::ILike, Op::In, Op::NotIn];
pub(super) const ID_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::In, Op::NotIn];

#[derive(Debug, Clone, PartialEq)]
pub(super) enum StrTest {
    Eq(String),
    Ne(String),
    Like(String),
    ILike(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    IsNull,
    IsNotNull,
}

impl StrTest {
    /// `None` is a missing key: only IS NULL holds for it.
    pub(super) fn holds(&self, value: Option<&str>) -> bool {
        let Some(v) = value else {
            return matches!(self, StrTest::IsNull);
        };
        match self {
            StrTest::Eq(s) => v == s,
            StrTest::Ne(s) => v != s,
            StrTest::Like(p) => like(v, p, false),
            StrTest::ILike(p) => like(v, p, true),
            StrTest::In(list) => list.iter().any(|s| s == v),
            StrTest::NotIn(list) => !list.iter().any(|s| s == v),
            StrTest::IsNull => false,
            StrTest::IsNotNull => true,
        }
    }
}

/// SQL LIKE: `%` is any run of characters, `_` any one; no escape character (MLflow
/// has none). Greedy with one backtrack point, so the work is at most text × pattern.
pub(super) fn like(text: &str, pattern: &str, fold_case: bool) -> bool {
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    let same = |a: char, b: char| a == b || (fold_case && a.to_lowercase().eq(b.to_lowercase()));
    let (mut ti, mut pi) = (0, 0);
    // After the latest `%`: where the pattern resumes, and the text position it took.
    let mut resume: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('%') => {
                pi += 1;
                resume = Some((pi, ti));
            }
            Some(&pc) if pc == '_' || same(pc, t[ti]) => {
                pi += 1;
                ti += 1;
            }
            _ => match resume {
                Some((rp, rt)) => {
                    pi = rp;
                    ti = rt + 1;
                    resume = Some((rp, rt + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '%')
}

pub(super) fn bad_comparator(c: &RawClause, what: &str, valid: &[Op]) -> SearchError {
    let labels: Vec<&str> = valid.iter().map(|op| op.label()).collect();
    SearchError::new(format!(
        "Invalid comparator '{}' for {what} in clause '{}'; valid comparators are {}",
        c.op.text,
        c.text,
        quoted_list(&labels)
    ))
}

pub(super) fn op_among(c: &RawClause, what: &str, valid: &[Op]) -> Result<Op, SearchError> {
    match c.op.op {
        Some(op) if valid.contains(&op) => Ok(op),
        _ => Err(bad_comparator(c, what, valid)),
    }
}

pub(super) fn is_null_op(c: &RawClause) -> bool {
    matches!(c.op.op, Some(Op::IsNull | Op::IsNotNull))
}

pub(super) fn is_list_op(c: &RawClause) -> bool {
    matches!(c.op.op, Some(Op::In | Op::NotIn))
}

pub(super) fn list_only_for(key: &str) -> SearchError {
    SearchError::new(format!(
        "Only ['{key}'] attributes support comparison with a list of quoted string values."
    ))
}

/// A string test from a clause whose comparator is among `valid`.
pub(super) fn str_test(c: &RawClause, what: &str, valid: &[Op]) -> Result<StrTest, SearchError> {
    let op = op_among(c, what, valid)?;
    let text = &c.value_text;
    let single = || {
        match &c.value {
        Some(Value::Str(s)) => Ok(s.clone()),
        Some(Value::List(_)) => Err(SearchError::new(format!(
            "Invalid clause '{}': a list of values needs IN or NOT IN, not '{}'",
            c.text, c.op.text
        ))),
        Some(Value::Num(_)) => Err(SearchError::new(format!(
            "Expected a quoted string value for {what} (e.g. 'my-value'). Got value {text}"
        ))),
        _ => Err(SearchError::new(format!(
            "Value for {what} is either not quoted or unidentified quote types used for string value {text}. Use either single or double quotes."
        ))),
    }
    };
    let list = || {
        match &c.value {
        Some(Value::List(items)) => Ok(items.clone()),
        _ => Err(SearchError::new(format!(
            "Expected a list of quoted string values after {} for {what}, e.g. ('a', 'b'). Got value {text}",
            c.op.text
        ))),
    }
    };
    Ok(match op {
        Op::Eq => StrTest::Eq(single()?),
        Op::Ne => StrTest::Ne(single()?),
        Op::Like => StrTest::Like(single()?),
        Op::ILike => StrTest::ILike(single()?),
        Op::In => StrTest::In(list()?),
        Op::NotIn => StrTest::NotIn(list()?),
        Op::IsNull => StrTest::IsNull,
        Op::IsNotNull => StrTest::IsNotNull,
        _ => return Err(bad_comparator(c, what, valid)),
    })
}

/// A numeric comparison, its number, for a numeric attribute.
pub(super) fn numeric_attr(c: &RawClause, key: &str) -> Result<(Cmp, Number), SearchError> {
    let what = format!("numeric attribute '{key}'");
    let cmp = Cmp::from_op(op_among(c, &what, NUMERIC_OPS)?)
        .ok_or_else(|| bad_comparator(c, &what, NUMERIC_OPS))?;
    match c.value {
        Some(Value::Num(n)) => Ok((cmp, n)),
        _ => Err(SearchError::new(format!(
            "Expected numeric value type for numeric attribute: {key}. Found {}",
            c.value_text
        ))),
    }
}

pub(super) fn null_only_for_keyed(c: &RawClause, kind: &str) -> SearchError {
    SearchError::new(format!(
        "IS NULL / IS NOT NULL is only supported for tags and params, not for '{kind}' '{}'",
        c.ident.key
    ))
}
