//! Syntax: a filter split into clauses joined by AND, and one `order_by` clause; only
//! syntax is checked here, meaning comes later per entity kind.

use super::lexer::{Cursor, Ident, Op, OpTok, Syntax, Value};
use super::{SearchError, MAX_ORDER_BY_CLAUSES, MAX_SEARCH_TEXT_BYTES};

pub(super) struct RawClause {
    pub(super) ident: Ident,
    pub(super) op: OpTok,
    /// Absent after IS NULL / IS NOT NULL.
    pub(super) value: Option<Value>,
    pub(super) value_text: String,
    /// The clause as written, for messages.
    pub(super) text: String,
}

/// Splits a filter into clauses joined by AND, checking only syntax.
pub(super) fn parse_clauses(filter: &str) -> Result<Vec<RawClause>, SearchError> {
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
pub(super) fn parse_order_clause(clause: &str) -> Result<(Ident, bool), SearchError> {
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

pub(super) fn check_order_size(order_by: &[String]) -> Result<(), SearchError> {
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
pub(super) fn quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| format!("'{}'", s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}
