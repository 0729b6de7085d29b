//! What an expression can see, and how it is handed to CEL.
//!
//! The caller (the executor) builds a [`Scope`] from a run's state: the run's
//! inputs, the steps that have a status, the step that ran last, and the
//! environment variables the workflow is allowed to read. Nothing here reads the
//! process environment or the clock: an expression sees exactly what the scope
//! holds, which is what makes evaluation reproducible from the log.
//!
//! Values are bound as CEL variables, converted from JSON. They are never turned
//! into expression text, so a value cannot change what an expression does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::common::value::Val;
use cel::{Context, ExecutionError};
use serde_json::Value;

use super::references::{References, Roots};

/// The values an expression is evaluated against.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The run's inputs: `inputs.<name>`.
    pub inputs: serde_json::Map<String, Value>,
    /// Steps by id: `steps.<id>` (`steps["<id>"]` when the id has a `-`). A step
    /// that has not run may be present with status `pending`; a step absent from
    /// the map is an error to refer to.
    pub steps: BTreeMap<String, StepView>,
    /// The step that ran last before this one: `prev`. `None` makes `prev` null.
    pub prev: Option<PrevStep>,
    /// The environment variables the workflow may read: `env.<NAME>`. Only
    /// allowlisted variables are put here by the caller; anything else is an error
    /// to refer to.
    pub env: BTreeMap<String, String>,
}

/// One step as expressions see it: `{status, outputs, output, error}`.
#[derive(Debug, Clone)]
pub struct StepView {
    /// `scheduled`, `running`, `succeeded`, `failed`, `skipped` or `pending`.
    pub status: String,
    /// The step's outputs, `null` before it has any. `output` is an alias.
    pub outputs: Value,
    /// Why the step failed, if it did.
    pub error: Option<String>,
}

/// The step that ran last: `prev` is `{step, status, output, outputs, error}`.
#[derive(Debug, Clone)]
pub struct PrevStep {
    /// The step's id: `prev.step`.
    pub id: String,
    pub view: StepView,
}

impl StepView {
    pub fn new(status: impl Into<String>, outputs: Value) -> Self {
        StepView {
            status: status.into(),
            outputs,
            error: None,
        }
    }

    /// A step that has not run yet.
    pub fn pending() -> Self {
        StepView::new("pending", Value::Null)
    }

    pub fn succeeded(outputs: Value) -> Self {
        StepView::new("succeeded", outputs)
    }

    pub fn failed(error: impl Into<String>) -> Self {
        StepView {
            error: Some(error.into()),
            ..StepView::new("failed", Value::Null)
        }
    }

    fn fields(&self) -> HashMap<String, cel::Value> {
        let outputs = json_to_cel(&self.outputs);
        let error = self.error.as_ref().map_or(cel::Value::Null, |e| string(e));
        HashMap::from([
            ("status".to_owned(), string(&self.status)),
            ("output".to_owned(), outputs.clone()),
            ("outputs".to_owned(), outputs),
            ("error".to_owned(), error),
        ])
    }
}

impl Scope {
    /// A context holding the variables in `roots`, over the shared environment.
    pub(super) fn bind(
        &self,
        env: Arc<cel::Env>,
        roots: Roots,
    ) -> Result<Context<'static, 'static>, String> {
        let mut context = Context::with_env(env);
        if roots.inputs {
            let inputs = self
                .inputs
                .iter()
                .map(|(k, v)| (k.clone(), json_to_cel(v)))
                .collect::<HashMap<_, _>>();
            add(&mut context, "inputs", map(inputs))?;
        }
        if roots.steps {
            let steps = self
                .steps
                .iter()
                .map(|(id, step)| (id.clone(), map(step.fields())))
                .collect::<HashMap<_, _>>();
            add(&mut context, "steps", map(steps))?;
        }
        if roots.prev {
            let prev = match &self.prev {
                Some(prev) => {
                    let mut fields = prev.view.fields();
                    fields.insert("step".to_owned(), string(&prev.id));
                    map(fields)
                }
                None => cel::Value::Null,
            };
            add(&mut context, "prev", prev)?;
        }
        if roots.env {
            let env = self
                .env
                .iter()
                .map(|(k, v)| (k.clone(), string(v)))
                .collect::<HashMap<_, _>>();
            add(&mut context, "env", map(env))?;
        }
        Ok(context)
    }

    /// Says what went wrong in the terms of a workflow author: which step had not
    /// run, which env variable is not allowlisted.
    ///
    /// CEL reports a missing map key by the key alone. The statically known
    /// references tell which variable it was looked up in; a key only reached
    /// dynamically (`steps[name]`) gets the generic message.
    pub(super) fn describe(&self, error: &ExecutionError, references: &References) -> String {
        match error {
            ExecutionError::NoSuchKey(key) => {
                let key = key.as_str();
                if references.steps.contains(key) && !self.steps.contains_key(key) {
                    format!("{}: no such step has run", path("steps", key))
                } else if references.env.contains(key) && !self.env.contains_key(key) {
                    format!(
                        "{}: not allowlisted (only allowlisted environment variables are visible)",
                        path("env", key)
                    )
                } else if references.inputs.contains(key) && !self.inputs.contains_key(key) {
                    format!("{}: no such input was given", path("inputs", key))
                } else {
                    format!("no such key '{key}'")
                }
            }
            ExecutionError::NoSuchOverload(overload)
                if references.prev
                    && self.prev.is_none()
                    && matches!(overload.function(), "_._" | "_[_]")
                    && overload.argument_types().first().map(String::as_str)
                        == Some("null_type") =>
            {
                "prev: no step has run before this one".to_owned()
            }
            ExecutionError::NoSuchOverload(overload) if overload.function() == "_._" => {
                format!(
                    "cannot read a field of {}",
                    overload_type(overload.argument_types(), 0)
                )
            }
            ExecutionError::NoSuchOverload(overload) if overload.function() == "_[_]" => format!(
                "cannot index {} with {}",
                overload_type(overload.argument_types(), 0),
                overload_type(overload.argument_types(), 1)
            ),
            ExecutionError::UndeclaredReference(name) => {
                format!("unknown name or function '{name}'")
            }
            ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
            ExecutionError::RemainderByZero(_) => "remainder by zero".to_owned(),
            ExecutionError::UnsupportedBinaryOperator(op, lhs, rhs) => format!(
                "cannot apply '{op}' to {} and {}",
                type_name(lhs),
                type_name(rhs)
            ),
            ExecutionError::Overflow(op, _, _) => format!("'{op}' overflows"),
            other => other.to_string(),
        }
    }
}

/// A value's CEL type name, as expressions write it (`double`, not `float`).
pub(super) fn type_name(value: &cel::Value) -> String {
    match value {
        cel::Value::Float(_) => "double".to_owned(),
        other => other.type_of().to_string(),
    }
}

/// The type of argument `i` of a failed call, as expressions write it.
fn overload_type(types: &[String], i: usize) -> String {
    match types.get(i).map(String::as_str) {
        Some("null_type") => "null".to_owned(),
        Some(t) => t.to_owned(),
        None => "a value".to_owned(),
    }
}

/// `root.name`, or `root["name"]` when `name` is not an identifier.
pub(super) fn path(root: &str, name: &str) -> String {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        format!("{root}.{name}")
    } else {
        format!("{root}[{}]", Value::from(name))
    }
}

fn add(
    context: &mut Context<'static, 'static>,
    name: &str,
    value: cel::Value,
) -> Result<(), String> {
    let value =
        Box::<dyn Val>::try_from(value).map_err(|e| format!("cannot bind '{name}': {e}"))?;
    context.add_variable_as_val(name, value);
    Ok(())
}

fn string(s: &str) -> cel::Value {
    cel::Value::String(Arc::new(s.to_owned()))
}

fn map(entries: HashMap<String, cel::Value>) -> cel::Value {
    cel::Value::Map(cel::objects::Map::from(entries))
}

/// JSON as a CEL value: integers that fit are `int`, larger ones `uint`, other
/// numbers `double`.
pub(super) fn json_to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                cel::Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                cel::Value::UInt(u)
            } else {
                cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => string(s),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Value::Object(fields) => map(fields
            .iter()
            .map(|(k, v)| (k.clone(), json_to_cel(v)))
            .collect()),
    }
}
