//! The expression language of workflow files: conditions and interpolation.
//!
//! A workflow decides at run time whether a step runs (`if:`) and builds the text
//! of prompts, commands and arguments from the run's inputs and the outputs of
//! earlier steps. Both need a small language, and this module is it. It is
//! [CEL](https://cel.dev) (the `cel` crate) because CEL is:
//!
//! - **parsed, not spliced**: an expression is parsed by a real grammar into a
//!   syntax tree; nothing is split on strings or handed to an `eval`;
//! - **side-effect free and terminating**: no I/O, no clock, no access to anything
//!   but the variables bound here, and no loop but a comprehension over a list or
//!   map (one in hand, or `lists.range(n)`, n at most a million). Evaluation is a
//!   pure function of the expression and the [`Scope`], so replaying a run from
//!   the log gives the same answers. Terminating is not cheap: the `cel` crate
//!   has no cost limit, so nested comprehensions (`lists.range(1000000).map(a,
//!   lists.range(1000000))`) or chained `replace` calls can run for hours or
//!   exhaust memory within the 4 KiB limit. A workflow file is code, trusted
//!   like its shell steps; the values it runs with cannot change what it does,
//!   though a long list makes a comprehension over it longer;
//! - **inspectable**: the syntax tree tells which inputs, steps and env variables an
//!   expression names ([`References`]), so loading a workflow can reject
//!   `steps.deploy` when there is no step `deploy`, before anything runs.
//!
//! # Values are data
//!
//! The values of inputs, outputs and env variables are bound as CEL *variables*.
//! They are never pasted into expression text, and rendering is a single pass: a
//! rendered value is never scanned for `${{` again. An input such as
//! `"; rm -rf ~; echo "` or `${{ env.SECRET }}` comes out as exactly that string.
//! What the caller does with a rendered string is the caller's business: a shell
//! command built by interpolation is still shell code, so the executor passes
//! values as arguments or environment, not by rendering them into a script.
//!
//! # The variables
//!
//! - `inputs`: the run's inputs, a map (`inputs.repo`).
//! - `steps`: steps by id, each `{status, outputs, output, error}`, `output` being
//!   an alias of `outputs` (`steps.build.status == 'succeeded'`). A step id with a
//!   `-` is written `steps["build-app"]`: `steps.build-app` is a subtraction.
//! - `prev`: the step that ran last, `{step, status, output, outputs, error}`, or
//!   null when none has.
//! - `env`: the allowlisted environment variables, a map of strings (`env.HOME`).
//!
//! Referring to a step that is not in the scope, or to an env variable that is not
//! allowlisted, is an [`EvalError`] that names it (`steps.build: no such step has
//! run`). Any other identifier is rejected when the expression is parsed.
//!
//! # Templates
//!
//! A string from a workflow file is a [`Template`]. `${{ expr }}` segments are
//! evaluated (GitHub-Actions style):
//!
//! - a string that is exactly one `${{ expr }}` renders to the expression's JSON
//!   value, type included (`"${{ inputs.count }}"` is the number `3`);
//! - otherwise the string renders to a string: string values inserted as they are,
//!   null as nothing, anything else as compact JSON;
//! - **escape**: `$${{` is a literal `${{` (`"$${{ x }}"` renders `${{ x }}`). Only
//!   `$$` directly before `{{` is an escape, so shell text like `echo $$` is left
//!   alone.
//!
//! # The `$`-shorthand
//!
//! The older dialect writes references with a `$`: a whole string such as
//! `$inputs.repo`, `$steps.build.outputs.url`, `$prev.output`, `$env.HOME` or
//! `$build.status` (a bare step id) is one reference, rendering to its typed value.
//! A string needs at least one `.` to be a reference, so `$HOME` alone is text; a
//! literal string that looks like a reference is written `${{ '$inputs.repo' }}`.
//! The same references work inside expressions (`$step_1.status == 'succeeded' &&
//! $inputs.count > 3`): a tokenizer rewrites them to plain CEL (`$build-app.status`
//! is `steps["build-app"].status`), skipping string literals and comments, so a `$`
//! inside `'...'` is untouched.
//!
//! # Errors and limits
//!
//! [`ExprError`] carries a byte offset into the string as written, through the
//! shorthand translation and the `${{` segment it is in. An expression over 4 KiB
//! ([`MAX_EXPRESSION_BYTES`]) is rejected; the literal text around `${{ }}`
//! segments is not limited here.

mod lexer;
mod references;
mod scope;
mod shorthand;
mod template;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::{ParseError, Program};
use serde_json::Value;

pub use references::References;
pub use scope::{PrevStep, Scope, StepView};
pub use template::{Template, check_templates, references_in, render_value};

use references::Roots;
use shorthand::Translated;

/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// An expression or template that cannot be parsed: what is wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at offset {offset}")]
pub struct ExprError {
    /// Byte offset in the source string as the user wrote it.
    pub offset: usize,
    pub message: String,
}

impl ExprError {
    pub(crate) fn new(offset: usize, message: impl Into<String>) -> Self {
        ExprError {
            offset,
            message: message.into(),
        }
    }

    /// The same error, for a source embedded `by` bytes into a larger one.
    pub(crate) fn shifted(self, by: usize) -> Self {
        ExprError {
            offset: self.offset + by,
            ..self
        }
    }
}

/// An expression that parsed but could not be evaluated against a scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot evaluate `{expression}`: {message}")]
pub struct EvalError {
    /// The expression as written.
    pub expression: String,
    pub message: String,
}

/// The CEL environment every expression is compiled and run in: the standard
/// library and the `strings`, `lists` and `math` extensions, all pure.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    for extension in [
        cel::extensions::strings as fn(&mut cel::Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        // An extension that clashed with the standard library would be left
        // out rather than fail every expression; the tests call a function of
        // each, so that cannot go unnoticed.
        let _ = env.add_extension(extension);
    }
    Arc::new(env)
});

/// A compiled CEL expression: a condition, or the inside of a `${{ }}`.
#[derive(Clone)]
pub struct Expression {
    source: String,
    cel: String,
    program: Arc<Program>,
    references: References,
    roots: Roots,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

/// Two expressions are equal when they were written the same and translate to the
/// same CEL, which always compiles to the same program. (A whole-string reference
/// and the same text parsed as an expression can differ: `$a.b-inputs.x`.)
impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.cel == other.cel
    }
}

impl Eq for Expression {}

impl Expression {
    /// Parses a CEL expression, `$`-shorthand references included.
    pub fn parse(source: &str) -> Result<Expression, ExprError> {
        check_length(source)?;
        if source.trim().is_empty() {
            return Err(ExprError::new(0, "empty expression"));
        }
        Expression::compile(source, shorthand::translate(source)?)
    }

    /// Parses a condition, which may also be written as one `${{ expr }}`, as in
    /// GitHub Actions' `if:`. Offsets stay those of `source`.
    pub fn parse_condition(source: &str) -> Result<Expression, ExprError> {
        match template::single_segment(source)? {
            Some((start, end)) => {
                Expression::parse(&source[start..end]).map_err(|e| e.shifted(start))
            }
            None => Expression::parse(source),
        }
    }

    /// A shorthand reference that is a whole string, already translated.
    fn from_whole_reference(source: &str, translated: Translated) -> Result<Expression, ExprError> {
        check_length(source)?;
        Expression::compile(source, translated)
    }

    fn compile(source: &str, translated: Translated) -> Result<Expression, ExprError> {
        let program =
            ENV.compile(&translated.text)
                .map_err(|errors| match errors.errors.first() {
                    Some(first) => parse_error(first, &translated),
                    None => ExprError::new(0, "cannot parse expression"),
                })?;
        let analysis = references::analyze(program.expression());
        if let Some((id, name)) = analysis.unknown {
            let offset = program
                .source_info()
                .offset_for(id)
                .map_or(0, |(start, _)| translated.source_offset(start as usize));
            return Err(ExprError::new(
                offset,
                format!("unknown name '{name}': expressions can use inputs, steps, prev and env"),
            ));
        }
        Ok(Expression {
            source: source.to_owned(),
            cel: translated.text,
            program: Arc::new(program),
            references: analysis.references,
            roots: analysis.roots,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The CEL the expression was translated to (the shorthand rewritten).
    pub fn cel_source(&self) -> &str {
        &self.cel
    }

    /// The inputs, steps and env variables the expression names.
    pub fn references(&self) -> &References {
        &self.references
    }

    /// Evaluates to a JSON value.
    pub fn evaluate(&self, scope: &Scope) -> Result<Value, EvalError> {
        let value = self.evaluate_cel(scope)?;
        value.json().map_err(|_| {
            self.error(format!(
                "the result is a {}, which has no JSON form",
                scope::type_name(&value)
            ))
        })
    }

    /// Evaluates a condition: anything but a bool is an error naming the type.
    pub fn evaluate_bool(&self, scope: &Scope) -> Result<bool, EvalError> {
        match self.evaluate_cel(scope)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(self.error(format!(
                "a condition must be a bool, got {}",
                scope::type_name(&other)
            ))),
        }
    }

    fn evaluate_cel(&self, scope: &Scope) -> Result<cel::Value, EvalError> {
        let context = scope
            .bind(Arc::clone(&ENV), self.roots)
            .map_err(|message| self.error(message))?;
        self.program
            .execute(&context)
            .map_err(|e| self.error(scope.describe(&e, &self.references)))
    }

    fn error(&self, message: impl Into<String>) -> EvalError {
        EvalError {
            expression: self.source.clone(),
            message: message.into(),
        }
    }
}

fn check_length(source: &str) -> Result<(), ExprError> {
    if source.len() > MAX_EXPRESSION_BYTES {
        return Err(ExprError::new(
            0,
            format!(
                "expression is {} bytes long; the limit is {MAX_EXPRESSION_BYTES} bytes (4 KiB)",
                source.len()
            ),
        ));
    }
    Ok(())
}

/// A CEL parse error, positioned in the source as written and said plainly.
fn parse_error(error: &ParseError, translated: &Translated) -> ExprError {
    let (line, column) = error.pos;
    let offset = translated.source_offset_of_position(line, column);
    ExprError::new(offset, plain_message(&error.msg))
}

/// ANTLR's messages list every token it would have accepted; keep what matters.
fn plain_message(msg: &str) -> String {
    let msg = msg.strip_prefix("Syntax error: ").unwrap_or(msg);
    let quoted = |rest: &str| {
        rest.strip_prefix('\'')
            .and_then(|r| r.rfind('\'').map(|end| r[..end].to_owned()))
    };
    let token = |t: String| {
        if t == "<EOF>" {
            "unexpected end of expression".to_owned()
        } else {
            format!("unexpected token '{t}'")
        }
    };
    for prefix in ["mismatched input ", "extraneous input "] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let rest = rest.split(" expecting ").next().unwrap_or(rest);
            if let Some(t) = quoted(rest) {
                return token(t);
            }
        }
    }
    if let Some(rest) = msg.strip_prefix("no viable alternative at input ")
        && let Some(t) = quoted(rest)
    {
        return format!("cannot parse '{t}'");
    }
    if let Some(rest) = msg.strip_prefix("token recognition error at: ")
        && let Some(t) = quoted(rest)
    {
        if t.starts_with(['\'', '"']) || t.contains(['\'', '"']) {
            return "unterminated string literal".to_owned();
        }
        return format!("unexpected character '{t}'");
    }
    if msg.contains("Recursion limit") {
        return "expression is nested too deeply".to_owned();
    }
    if msg.contains("error recovery attempt limit exceeded") {
        return "too many syntax errors".to_owned();
    }
    msg.to_owned()
}
