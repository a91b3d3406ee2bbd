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

use std::cmp::Ordering;
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
// Syntax: clauses, identifiers, comparators and values
// ---------------------------------------------------------------------------

/// A syntax problem, worded without its prefix; the caller says whether it was in a
/// filter or an `order_by` clause.
struct Syntax(String);

/// `key` is the unquoted key; `prefix` the part before the first dot (backticks
/// removed), absent for a bare name; `text` is the identifier as written, for messages.
struct Ident {
    prefix: Option<String>,
    key: String,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Like,
    ILike,
    In,
    NotIn,
    IsNull,
    IsNotNull,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Like => "LIKE",
            Op::ILike => "ILIKE",
            Op::In => "IN",
            Op::NotIn => "NOT IN",
            Op::IsNull => "IS NULL",
            Op::IsNotNull => "IS NOT NULL",
        }
    }
}

/// A comparator as written; `op` is `None` for one that is recognised but never valid
/// (`==`, `<>`, `NOT LIKE`, `RLIKE`), so the error can list the valid ones.
struct OpTok {
    op: Option<Op>,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

enum Value {
    Str(String),
    Num(Number),
    List(Vec<String>),
    /// Unquoted or backtick-quoted text, or a malformed number: never a valid value, but
    /// what it should have been depends on the key, so the error comes later.
    Bare,
}

struct RawClause {
    ident: Ident,
    op: OpTok,
    /// Absent after IS NULL / IS NOT NULL.
    value: Option<Value>,
    value_text: String,
    /// The clause as written, for messages.
    text: String,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_op_char(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '!' | '~')
}

/// A position in the text being parsed; `pos` is a byte offset on a char boundary.
struct Cursor<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(src: &'a str) -> Self {
        Self { src, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// 1-based, in characters: what an editor shows.
    fn column_of(&self, at: usize) -> usize {
        self.src[..at].chars().count() + 1
    }

    fn here(&self) -> String {
        format!("column {}", self.column_of(self.pos))
    }

    /// What comes next, for "found ..." in a message.
    fn found(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() {
            return "the end of the text".to_string();
        }
        if rest.starts_with(char::is_whitespace) {
            return "whitespace".to_string();
        }
        // Up to the next whitespace, at most 24 chars.
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let shown: String = rest[..end].chars().take(24).collect();
        format!("'{shown}'")
    }

    fn peek_word(&self) -> &'a str {
        let rest = self.rest();
        let end = rest.find(|c| !is_word_char(c)).unwrap_or(rest.len());
        &rest[..end]
    }

    fn word(&mut self) -> &'a str {
        let w = self.peek_word();
        self.pos += w.len();
        w
    }

    /// Consumes `kw` if it is the whole next word, in any case.
    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = self.peek_word().eq_ignore_ascii_case(kw);
        if hit {
            self.word();
        }
        hit
    }

    fn at_number(&self) -> bool {
        let rest = self.rest();
        let mut cs = rest.strip_prefix('-').unwrap_or(rest).chars();
        match cs.next() {
            Some(c) if c.is_ascii_digit() => true,
            Some('.') => cs.next().is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
    }

    /// At an opening quote (`'`, `"` or a backtick): the text up to its close. A doubled
    /// quote stands for one, as does a backslash before it (not in backticks); `\\` is
    /// kept whole so that it does not escape a closing quote.
    fn quoted(&mut self) -> Result<String, Syntax> {
        let start = self.pos;
        let Some(q) = self.bump() else {
            return Err(Syntax(format!("expected a quote at {}", self.here())));
        };
        let mut out = String::new();
        loop {
            match self.bump() {
                None => {
                    let what = if q == '`' { "name" } else { "string" };
                    return Err(Syntax(format!(
                        "unterminated quoted {what} starting at column {}; close it with {q}",
                        self.column_of(start)
                    )));
                }
                Some(c) if c == q => {
                    if self.peek() == Some(q) {
                        self.bump();
                        out.push(q);
                    } else {
                        return Ok(out);
                    }
                }
                Some('\\') if q != '`' => match self.peek() {
                    Some(n) if n == q => {
                        self.bump();
                        out.push(q);
                    }
                    Some('\\') => {
                        self.bump();
                        out.push_str("\\\\");
                    }
                    _ => out.push('\\'),
                },
                Some(c) => out.push(c),
            }
        }
    }

    /// `name`, `` `name` ``, `"name"`, or `prefix.key` where the key is dotted words or
    /// one name quoted with backticks, double or single quotes.
    fn identifier(&mut self) -> Result<Ident, Syntax> {
        let start = self.pos;
        let (first, quote) = match self.peek() {
            Some(q @ ('`' | '"')) => (self.quoted()?, Some(q)),
            Some(c) if is_word_char(c) => (self.word().to_string(), None),
            _ => {
                return Err(Syntax(format!(
                    "expected an identifier such as metrics.acc, params.lr or tags.team at {}, found {}",
                    self.here(),
                    self.found()
                )))
            }
        };
        if self.peek() != Some('.') {
            if first.is_empty() {
                return Err(Syntax(format!(
                    "empty name at column {}",
                    self.column_of(start)
                )));
            }
            return Ok(Ident {
                prefix: None,
                key: first,
                text: self.src[start..self.pos].to_string(),
            });
        }
        // MLflow trims backticks from an entity type but not double quotes, so
        // `"metrics".x` names the entity type `"metrics"`, which is unknown.
        let prefix = match quote {
            Some('"') => format!("\"{first}\""),
            _ => first,
        };
        self.bump();
        let key = match self.peek() {
            // MLflow strips single quotes from a key too (not from a bare name).
            Some('`' | '"' | '\'') => {
                let key = self.quoted()?;
                if self.peek().is_some_and(|c| c == '.' || is_word_char(c)) {
                    return Err(Syntax(format!(
                        "unexpected {} at {} after the quoted key in '{}'; quote the whole key",
                        self.found(),
                        self.here(),
                        &self.src[start..self.pos]
                    )));
                }
                key
            }
            Some(c) if is_word_char(c) => {
                let key_start = self.pos;
                loop {
                    self.word();
                    if self.peek() == Some('.') && self.peek2().is_some_and(is_word_char) {
                        self.bump();
                    } else {
                        break;
                    }
                }
                self.src[key_start..self.pos].to_string()
            }
            _ => {
                return Err(Syntax(format!(
                    "expected a key after '{}' at {}, found {}",
                    &self.src[start..self.pos],
                    self.here(),
                    self.found()
                )))
            }
        };
        let text = self.src[start..self.pos].to_string();
        if key.is_empty() {
            return Err(Syntax(format!("empty key in '{text}'")));
        }
        Ok(Ident {
            prefix: Some(prefix),
            key,
            text,
        })
    }

    fn comparator(&mut self, ident: &Ident) -> Result<OpTok, Syntax> {
        // Text right against the identifier (`tags.my-tag`) is most likely part of a key
        // that needs quoting.
        let adjacent = self.peek().is_some_and(|c| !c.is_whitespace());
        self.skip_ws();
        let expected = |c: &Self| {
            let hint = if adjacent {
                "; quote a key with other characters in backticks, e.g. tags.`my-tag`"
            } else {
                ""
            };
            Syntax(format!(
                "expected a comparator (=, !=, <, <=, >, >=, LIKE, ILIKE, IN, NOT IN, IS NULL, IS NOT NULL) after '{}' at {}, found {}{hint}",
                ident.text,
                c.here(),
                c.found()
            ))
        };
        let start = self.pos;
        match self.peek() {
            Some(c) if is_op_char(c) => {
                while self.peek().is_some_and(is_op_char) {
                    self.bump();
                }
                let text = &self.src[start..self.pos];
                let op = match text {
                    "=" => Some(Op::Eq),
                    "!=" => Some(Op::Ne),
                    "<" => Some(Op::Lt),
                    "<=" => Some(Op::Le),
                    ">" => Some(Op::Gt),
                    ">=" => Some(Op::Ge),
                    _ => None,
                };
                Ok(OpTok {
                    op,
                    text: text.to_string(),
                })
            }
            Some(c) if is_word_char(c) => {
                let word = self.peek_word().to_ascii_uppercase();
                let (op, text) = match word.as_str() {
                    "LIKE" => (Some(Op::Like), word),
                    "ILIKE" => (Some(Op::ILike), word),
                    "IN" => (Some(Op::In), word),
                    "RLIKE" => (None, word),
                    "NOT" | "IS" => {
                        self.word();
                        self.skip_ws();
                        let next = self.peek_word().to_ascii_uppercase();
                        let found = match (word.as_str(), next.as_str()) {
                            ("NOT", "IN") => Some(Op::NotIn),
                            ("NOT", "LIKE" | "ILIKE" | "RLIKE") => None,
                            ("IS", "NULL") => Some(Op::IsNull),
                            ("IS", "NOT") => {
                                self.word();
                                self.skip_ws();
                                if !self.peek_word().eq_ignore_ascii_case("NULL") {
                                    return Err(Syntax(format!(
                                        "expected NULL after IS NOT at {}, found {}",
                                        self.here(),
                                        self.found()
                                    )));
                                }
                                Some(Op::IsNotNull)
                            }
                            ("NOT", _) => {
                                return Err(Syntax(format!(
                                    "expected IN after NOT at {}, found {}",
                                    self.here(),
                                    self.found()
                                )))
                            }
                            _ => {
                                return Err(Syntax(format!(
                                    "expected NULL or NOT NULL after IS at {}, found {}",
                                    self.here(),
                                    self.found()
                                )))
                            }
                        };
                        let text = match found {
                            Some(op) => op.label().to_string(),
                            None => format!("{word} {next}"),
                        };
                        (found, text)
                    }
                    _ => return Err(expected(self)),
                };
                self.word();
                Ok(OpTok { op, text })
            }
            _ => Err(expected(self)),
        }
    }

    fn value(&mut self, ident: &Ident, op: &OpTok) -> Result<Value, Syntax> {
        self.skip_ws();
        match self.peek() {
            Some('\'' | '"') => Ok(Value::Str(self.quoted()?)),
            Some('`') => {
                self.quoted()?;
                Ok(Value::Bare)
            }
            Some('(') => Ok(Value::List(self.list()?)),
            Some(_) if self.at_number() => Ok(self.number()),
            Some(c) if is_word_char(c) => {
                self.word();
                Ok(Value::Bare)
            }
            None => Err(Syntax(format!(
                "missing a value after '{} {}' at {}",
                ident.text,
                op.text,
                self.here()
            ))),
            Some(_) => Err(Syntax(format!(
                "expected a value after '{} {}' at {}, found {}",
                ident.text,
                op.text,
                self.here(),
                self.found()
            ))),
        }
    }

    /// `-?digits[.digits][e[+-]digits]`, or `.digits...`; one that runs into letters or
    /// another dot (`1abc`, `1.2.3`) is consumed whole as a bare word.
    fn number(&mut self) -> Value {
        let start = self.pos;
        if self.peek() == Some('-') {
            self.bump();
        }
        let mut integer = true;
        self.digits();
        if self.peek() == Some('.') {
            integer = false;
            self.bump();
            self.digits();
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let mut cs = self.rest().chars().skip(1);
            let exponent = match cs.next() {
                Some('+' | '-') => cs.next().is_some_and(|c| c.is_ascii_digit()),
                Some(c) => c.is_ascii_digit(),
                None => false,
            };
            if exponent {
                integer = false;
                self.bump();
                if matches!(self.peek(), Some('+' | '-')) {
                    self.bump();
                }
                self.digits();
            }
        }
        if self.peek().is_some_and(|c| c == '.' || is_word_char(c)) {
            while self.peek().is_some_and(|c| c == '.' || is_word_char(c)) {
                self.bump();
            }
            return Value::Bare;
        }
        let text = &self.src[start..self.pos];
        if integer {
            if let Ok(i) = text.parse::<i64>() {
                return Value::Num(Number::Int(i));
            }
        }
        match text.parse::<f64>() {
            Ok(f) => Value::Num(Number::Float(f)),
            Err(_) => Value::Bare,
        }
    }

    /// `('a', "b", ...)`, a trailing comma allowed (Python's tuple syntax, which MLflow
    /// evaluates).
    fn list(&mut self) -> Result<Vec<String>, Syntax> {
        const WHILE: &str = "while parsing a list in the query";
        let open = self.pos;
        let unclosed = |c: &Self| {
            Syntax(format!(
                "{WHILE}, the '(' at column {} is never closed (ill-formed list)",
                c.column_of(open)
            ))
        };
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(')') => break,
                Some('\'' | '"') => {
                    items.push(self.quoted()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(',') => {
                            self.bump();
                        }
                        Some(')') => break,
                        None => return Err(unclosed(self)),
                        Some(_) => {
                            return Err(Syntax(format!(
                                "{WHILE}, expected ',' or ')' at {}, found {}",
                                self.here(),
                                self.found()
                            )))
                        }
                    }
                }
                None => return Err(unclosed(self)),
                Some(_) => {
                    return Err(Syntax(format!(
                        "{WHILE}, expected a quoted string value at {}, found {}",
                        self.here(),
                        self.found()
                    )))
                }
            }
        }
        self.bump();
        if items.is_empty() {
            return Err(Syntax(format!(
                "{WHILE}, expected a non-empty list of string values, but got empty list at column {}",
                self.column_of(open)
            )));
        }
        Ok(items)
    }
}

/// Splits a filter into clauses joined by AND, checking only syntax.
fn parse_clauses(filter: &str) -> Result<Vec<RawClause>, SearchError> {
    if filter.len() > MAX_SEARCH_TEXT_BYTES {
        return Err(SearchError::new(format!(
            "Filter string is too long: {} bytes; at most {MAX_SEARCH_TEXT_BYTES} are allowed",
            filter.len()
        )));
    }
    let invalid =
        |Syntax(d): Syntax| SearchError::new(format!("Invalid clause(s) in filter string: {d}"));
    let or_error = |c: &Cursor| {
        SearchError::new(format!(
            "Invalid clause(s) in filter string: 'OR' at {}. OR is not supported; join clauses with AND",
            c.here()
        ))
    };
    let mut c = Cursor::new(filter);
    let mut clauses = Vec::new();
    c.skip_ws();
    if c.at_end() {
        return Ok(clauses);
    }
    loop {
        let start = c.pos;
        if c.peek() == Some('(') {
            return Err(invalid(Syntax(format!(
                "parentheses are not supported (at {}); write clauses joined with AND",
                c.here()
            ))));
        }
        let word = c.peek_word();
        if word.eq_ignore_ascii_case("OR") {
            return Err(or_error(&c));
        }
        if word.eq_ignore_ascii_case("AND") {
            return Err(invalid(Syntax(format!(
                "unexpected 'AND' at {}; expected a clause such as metrics.acc > 0.9",
                c.here()
            ))));
        }
        let ident = c.identifier().map_err(invalid)?;
        let op = c.comparator(&ident).map_err(invalid)?;
        let value_start = c.pos;
        let value = match op.op {
            Some(Op::IsNull | Op::IsNotNull) => None,
            _ => Some(c.value(&ident, &op).map_err(invalid)?),
        };
        let value_text = c.src[value_start..c.pos].trim_start().to_string();
        clauses.push(RawClause {
            ident,
            op,
            value,
            value_text,
            text: filter[start..c.pos].to_string(),
        });
        c.skip_ws();
        if c.at_end() {
            return Ok(clauses);
        }
        if c.eat_keyword("AND") {
            c.skip_ws();
            if c.at_end() {
                return Err(invalid(Syntax(
                    "the filter ends with AND; add a clause after it or remove it".to_string(),
                )));
            }
            continue;
        }
        if c.peek_word().eq_ignore_ascii_case("OR") {
            return Err(or_error(&c));
        }
        if c.peek() == Some(';') {
            return Err(SearchError::new(format!(
                "Search filter contained multiple expressions (';' at {}). Provide AND-ed expression list.",
                c.here()
            )));
        }
        let last = &clauses[clauses.len() - 1].text;
        return Err(invalid(Syntax(format!(
            "unexpected {} at {} after '{last}'; join clauses with AND",
            c.found(),
            c.here()
        ))));
    }
}

/// One `order_by` clause: an identifier and whether it is ascending (the default).
fn parse_order_clause(clause: &str) -> Result<(Ident, bool), SearchError> {
    let unparsed = |d: String| {
        SearchError::new(format!(
            "Invalid order_by clause '{clause}'. Could not be parsed: {d}"
        ))
    };
    let mut c = Cursor::new(clause);
    c.skip_ws();
    if c.at_end() {
        return Err(unparsed(
            "it is empty; write it like 'metrics.acc DESC'".to_string(),
        ));
    }
    let ident = c.identifier().map_err(|Syntax(d)| unparsed(d))?;
    c.skip_ws();
    let mut ascending = true;
    if !c.at_end() {
        if c.eat_keyword("DESC") {
            ascending = false;
        } else if !c.eat_keyword("ASC") {
            return Err(SearchError::new(format!(
                "Invalid ordering key in order_by clause '{clause}': expected ASC or DESC at {}, found {}",
                c.here(),
                c.found()
            )));
        }
        c.skip_ws();
        if !c.at_end() {
            return Err(unparsed(format!(
                "unexpected {} at {}",
                c.found(),
                c.here()
            )));
        }
    }
    Ok((ident, ascending))
}

fn check_order_size(order_by: &[String]) -> Result<(), SearchError> {
    if order_by.len() > MAX_ORDER_BY_CLAUSES {
        return Err(SearchError::new(format!(
            "Invalid order_by: {} clauses; at most {MAX_ORDER_BY_CLAUSES} are allowed",
            order_by.len()
        )));
    }
    let bytes: usize = order_by.iter().map(String::len).sum();
    if bytes > MAX_SEARCH_TEXT_BYTES {
        return Err(SearchError::new(format!(
            "Invalid order_by: {bytes} bytes in all; at most {MAX_SEARCH_TEXT_BYTES} are allowed"
        )));
    }
    Ok(())
}

/// `['a', 'b']`, as MLflow prints a Python list in its messages.
fn quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| format!("'{}'", s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

// ---------------------------------------------------------------------------
// Meaning: shared pieces
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn from_op(op: Op) -> Option<Cmp> {
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
    fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
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

const NUMERIC_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge];
const KEYED_STRING_OPS: &[Op] = &[
    Op::Eq,
    Op::Ne,
    Op::Like,
    Op::ILike,
    Op::IsNull,
    Op::IsNotNull,
];
const TEXT_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Like, Op::ILike];
const LIST_TEXT_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::Like, Op::ILike, Op::In, Op::NotIn];
const ID_OPS: &[Op] = &[Op::Eq, Op::Ne, Op::In, Op::NotIn];

#[derive(Debug, Clone, PartialEq)]
enum StrTest {
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
    fn holds(&self, value: Option<&str>) -> bool {
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
fn like(text: &str, pattern: &str, fold_case: bool) -> bool {
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

fn bad_comparator(c: &RawClause, what: &str, valid: &[Op]) -> SearchError {
    let labels: Vec<&str> = valid.iter().map(|op| op.label()).collect();
    SearchError::new(format!(
        "Invalid comparator '{}' for {what} in clause '{}'; valid comparators are {}",
        c.op.text,
        c.text,
        quoted_list(&labels)
    ))
}

fn op_among(c: &RawClause, what: &str, valid: &[Op]) -> Result<Op, SearchError> {
    match c.op.op {
        Some(op) if valid.contains(&op) => Ok(op),
        _ => Err(bad_comparator(c, what, valid)),
    }
}

fn is_null_op(c: &RawClause) -> bool {
    matches!(c.op.op, Some(Op::IsNull | Op::IsNotNull))
}

fn is_list_op(c: &RawClause) -> bool {
    matches!(c.op.op, Some(Op::In | Op::NotIn))
}

fn list_only_for(key: &str) -> SearchError {
    SearchError::new(format!(
        "Only ['{key}'] attributes support comparison with a list of quoted string values."
    ))
}

/// A string test from a clause whose comparator is among `valid`.
fn str_test(c: &RawClause, what: &str, valid: &[Op]) -> Result<StrTest, SearchError> {
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
fn numeric_attr(c: &RawClause, key: &str) -> Result<(Cmp, Number), SearchError> {
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

fn null_only_for_keyed(c: &RawClause, kind: &str) -> SearchError {
    SearchError::new(format!(
        "IS NULL / IS NOT NULL is only supported for tags and params, not for '{kind}' '{}'",
        c.ident.key
    ))
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

#[cfg(test)]
mod tests;
