//! Strings from workflow files that may contain expressions.
//!
//! A template is parsed once, when the workflow is loaded, into literal text and
//! compiled expressions; rendering then only evaluates. The text between segments
//! is never scanned again, and neither is what the expressions return: rendering
//! is one pass, so a value that looks like `${{ ... }}` stays text.

use serde_json::Value;

use super::lexer::{CommentEnd, Lexer, Token};
use super::{EvalError, ExprError, Expression, References, Scope, shorthand};

/// A string from a workflow file: literal text, one typed expression, or text
/// with `${{ expr }}` segments. See the [module docs](super) for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// No expression: renders to this string (escapes already undone).
    Literal(String),
    /// Exactly one `${{ expr }}`, or a whole-string shorthand reference: renders
    /// to the expression's value, type included.
    Typed(Expression),
    /// Text and segments: renders to a string.
    Text(Vec<Segment>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    Expr(Expression),
}

impl Template {
    pub fn parse(source: &str) -> Result<Template, ExprError> {
        let kind = match shorthand::whole_reference(source) {
            Some(translated) => Kind::Typed(Expression::from_whole_reference(source, translated)?),
            None => {
                let mut segments = split(source)?;
                match segments.as_slice() {
                    [] => Kind::Literal(String::new()),
                    [Segment::Text(_)] | [Segment::Expr(_)] => match segments.swap_remove(0) {
                        Segment::Text(text) => Kind::Literal(text),
                        Segment::Expr(expr) => Kind::Typed(expr),
                    },
                    _ => Kind::Text(segments),
                }
            }
        };
        Ok(Template {
            source: source.to_owned(),
            kind,
        })
    }

    /// The string as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template contains no expression: it renders to fixed text.
    pub fn is_literal(&self) -> bool {
        matches!(self.kind, Kind::Literal(_))
    }

    /// Whether the template is one expression that renders to a typed value.
    pub fn is_typed(&self) -> bool {
        matches!(self.kind, Kind::Typed(_))
    }

    /// The expressions in the template, in order.
    pub fn expressions(&self) -> Vec<&Expression> {
        match &self.kind {
            Kind::Literal(_) => Vec::new(),
            Kind::Typed(expr) => vec![expr],
            Kind::Text(segments) => segments
                .iter()
                .filter_map(|s| match s {
                    Segment::Expr(expr) => Some(expr),
                    Segment::Text(_) => None,
                })
                .collect(),
        }
    }

    /// Everything the template's expressions refer to.
    pub fn references(&self) -> References {
        let mut references = References::default();
        for expr in self.expressions() {
            references.merge(expr.references());
        }
        references
    }

    /// Renders to a JSON value: the typed value of a lone expression, a string
    /// otherwise.
    pub fn render(&self, scope: &Scope) -> Result<Value, EvalError> {
        match &self.kind {
            Kind::Literal(text) => Ok(Value::String(text.clone())),
            Kind::Typed(expr) => expr.evaluate(scope),
            Kind::Text(segments) => {
                let mut out = String::new();
                for segment in segments {
                    match segment {
                        Segment::Text(text) => out.push_str(text),
                        Segment::Expr(expr) => push_text(&mut out, &expr.evaluate(scope)?),
                    }
                }
                Ok(Value::String(out))
            }
        }
    }

    /// Renders to a string, whatever the template is: a typed value is written as
    /// it would be inside text.
    pub fn render_text(&self, scope: &Scope) -> Result<String, EvalError> {
        match self.render(scope)? {
            Value::String(s) => Ok(s),
            other => {
                let mut out = String::new();
                push_text(&mut out, &other);
                Ok(out)
            }
        }
    }
}

/// A value inside text: a string as it is, null as nothing, the rest as compact JSON.
fn push_text(out: &mut String, value: &Value) {
    match value {
        Value::String(s) => out.push_str(s),
        Value::Null => {}
        other => out.push_str(&other.to_string()),
    }
}

/// Splits a template into text and expressions, undoing `$${{` escapes.
fn split(source: &str) -> Result<Vec<Segment>, ExprError> {
    let bytes = source.as_bytes();
    let mut segments = Vec::new();
    let mut text = String::new();
    // `run` is where the text not yet copied starts; `i` only stops on ASCII
    // bytes before slicing, so every slice is on character boundaries.
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"$${{") {
            text.push_str(&source[run..i]);
            text.push_str("${{");
            i += 4;
            run = i;
        } else if bytes[i..].starts_with(b"${{") {
            text.push_str(&source[run..i]);
            if !text.is_empty() {
                segments.push(Segment::Text(std::mem::take(&mut text)));
            }
            let (start, end, close) = segment_bounds(source, i)?;
            let expr = Expression::parse(&source[start..end]).map_err(|e| e.shifted(start))?;
            segments.push(Segment::Expr(expr));
            i = close + 2;
            run = i;
        } else {
            i += 1;
        }
    }
    text.push_str(&source[run..]);
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(segments)
}

/// For the `${{` at `open`: the trimmed expression's start and end, and where its
/// closing `}}` is.
fn segment_bounds(source: &str, open: usize) -> Result<(usize, usize, usize), ExprError> {
    let close = find_close(source, open)?;
    let inner = &source[open + 3..close];
    let start = open + 3 + (inner.len() - inner.trim_start().len());
    let end = open + 3 + inner.trim_end().len();
    if start >= end {
        return Err(ExprError::new(open, "empty '${{ }}'"));
    }
    Ok((start, end, close))
}

/// The `}}` closing the `${{` at `open`: the first one outside string literals and
/// outside braces opened within the segment (a map literal `{'a': {'b': 1}}`).
fn find_close(source: &str, open: usize) -> Result<usize, ExprError> {
    let bytes = source.as_bytes();
    let mut lexer = Lexer::new(source, open + 3, CommentEnd::NewlineOrBraces);
    let mut depth = 0usize;
    while let Some(token) = lexer.next_token() {
        match token {
            Token::Literal {
                start,
                terminated: false,
                ..
            } => return Err(ExprError::new(start, "unterminated string literal")),
            Token::Char { ch: '{', .. } => depth += 1,
            Token::Char { pos, ch: '}' } => {
                if depth > 0 {
                    depth -= 1;
                } else if bytes.get(pos + 1) == Some(&b'}') {
                    return Ok(pos);
                }
            }
            _ => {}
        }
    }
    Err(ExprError::new(open, "'${{' is not closed by '}}'"))
}

/// If `source` is one `${{ expr }}` (whitespace around allowed), the trimmed
/// expression's start and end.
pub(super) fn single_segment(source: &str) -> Result<Option<(usize, usize)>, ExprError> {
    let open = source.len() - source.trim_start().len();
    if !source.as_bytes()[open..].starts_with(b"${{") {
        return Ok(None);
    }
    let (start, end, close) = segment_bounds(source, open)?;
    Ok(source[close + 2..]
        .trim()
        .is_empty()
        .then_some((start, end)))
}

/// Parses every string in a JSON tree as a template. Each error comes with the
/// JSON pointer (RFC 6901) of its string; object keys are not templates.
pub fn check_templates(value: &Value) -> Vec<(String, ExprError)> {
    let mut errors = Vec::new();
    each_string(value, &mut String::new(), &mut |pointer, s| {
        if let Err(e) = Template::parse(s) {
            errors.push((pointer.to_owned(), e));
        }
    });
    errors
}

/// Everything the templates in a JSON tree refer to. Strings that do not parse
/// are skipped: [`check_templates`] reports them.
pub fn references_in(value: &Value) -> References {
    let mut references = References::default();
    each_string(value, &mut String::new(), &mut |_, s| {
        if let Ok(template) = Template::parse(s) {
            references.merge(&template.references());
        }
    });
    references
}

/// Renders every string in a JSON tree, keeping its structure; object keys are
/// left as they are. An error says at which JSON pointer it happened.
pub fn render_value(value: &Value, scope: &Scope) -> Result<Value, EvalError> {
    render_at(value, scope, &mut String::new())
}

fn render_at(value: &Value, scope: &Scope, pointer: &mut String) -> Result<Value, EvalError> {
    let at = |pointer: &str, message: String| {
        if pointer.is_empty() {
            message
        } else {
            format!("at {pointer}: {message}")
        }
    };
    match value {
        Value::String(s) => {
            let template = Template::parse(s).map_err(|e| EvalError {
                expression: s.clone(),
                message: at(pointer, e.to_string()),
            })?;
            template.render(scope).map_err(|e| EvalError {
                message: at(pointer, e.message),
                ..e
            })
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                push_token(pointer, &i.to_string());
                out.push(render_at(item, scope, pointer)?);
                pointer.truncate(len);
            }
            Ok(Value::Array(out))
        }
        Value::Object(fields) => {
            let mut out = serde_json::Map::with_capacity(fields.len());
            for (key, item) in fields {
                let len = pointer.len();
                push_token(pointer, key);
                out.insert(key.clone(), render_at(item, scope, pointer)?);
                pointer.truncate(len);
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

fn each_string(value: &Value, pointer: &mut String, f: &mut impl FnMut(&str, &str)) {
    match value {
        Value::String(s) => f(pointer, s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                push_token(pointer, &i.to_string());
                each_string(item, pointer, f);
                pointer.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                let len = pointer.len();
                push_token(pointer, key);
                each_string(item, pointer, f);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Appends `/token` to a JSON pointer, escaping `~` and `/` (RFC 6901).
fn push_token(pointer: &mut String, token: &str) {
    pointer.push('/');
    pointer.push_str(&token.replace('~', "~0").replace('/', "~1"));
}
