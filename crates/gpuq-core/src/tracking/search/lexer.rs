//! Syntax: the pieces of a clause (identifiers, comparators and values) and the cursor
//! that reads them, shared by run and experiment filters and orders.

/// A syntax problem, worded without its prefix; the caller says whether it was in a
/// filter or an `order_by` clause.
pub(super) struct Syntax(pub(super) String);

/// `key` is the unquoted key; `prefix` the part before the first dot (backticks
/// removed), absent for a bare name; `text` is the identifier as written, for messages.
pub(super) struct Ident {
    pub(super) prefix: Option<String>,
    pub(super) key: String,
    pub(super) text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
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
    pub(super) fn label(self) -> &'static str {
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
pub(super) struct OpTok {
    pub(super) op: Option<Op>,
    pub(super) text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

pub(super) enum Value {
    Str(String),
    Num(Number),
    List(Vec<String>),
    /// Unquoted or backtick-quoted text, or a malformed number: never a valid value, but
    /// what it should have been depends on the key, so the error comes later.
    Bare,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_op_char(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '!' | '~')
}

/// A position in the text being parsed; `pos` is a byte offset on a char boundary.
pub(super) struct Cursor<'a> {
    pub(super) src: &'a str,
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(src: &'a str) -> Self {
        Self { src, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    pub(super) fn peek(&self) -> Option<char> {
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

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    pub(super) fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// 1-based, in characters: what an editor shows.
    fn column_of(&self, at: usize) -> usize {
        self.src[..at].chars().count() + 1
    }

    pub(super) fn here(&self) -> String {
        format!("column {}", self.column_of(self.pos))
    }

    /// What comes next, for "found ..." in a message.
    pub(super) fn found(&self) -> String {
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

    pub(super) fn peek_word(&self) -> &'a str {
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
    pub(super) fn eat_keyword(&mut self, kw: &str) -> bool {
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
    pub(super) fn identifier(&mut self) -> Result<Ident, Syntax> {
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

    pub(super) fn comparator(&mut self, ident: &Ident) -> Result<OpTok, Syntax> {
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

    pub(super) fn value(&mut self, ident: &Ident, op: &OpTok) -> Result<Value, Syntax> {
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
