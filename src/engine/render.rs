//! From a step definition to the [`Work`] a worker performs: templates rendered
//! against the run's state, declared tools expanded, a fallback tool applied.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::domain::ids::StepId;
use crate::domain::run::{Run, StepCall, StepState};
use crate::expr::{EvalError, PrevStep, Scope, StepView, Template, render_value};
use crate::workflow::BUILTIN_TOOLS;
use crate::workflow::model::{Step, StepKind, ToolDefinition, Workflow};

use super::Work;

/// What expressions see at a step: the run's inputs, every step of the workflow
/// (`pending` before it runs), the step before this one, the allowlisted env.
pub(crate) fn scope(
    step_ids: &[String],
    run: &Run,
    prev: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Scope {
    let inputs = match run.inputs() {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let view = |id: &str| -> StepView {
        let Ok(step_id) = StepId::try_from(id) else {
            return StepView::pending();
        };
        match run.step(&step_id) {
            None => StepView::pending(),
            Some(StepState::Succeeded { output, .. }) => StepView::succeeded(Value::clone(output)),
            Some(StepState::Failed { error, .. }) => StepView::failed(error.to_string()),
            Some(other) => StepView::new(other.phase().as_str(), Value::Null),
        }
    };
    Scope {
        inputs,
        steps: step_ids.iter().map(|id| (id.clone(), view(id))).collect(),
        prev: prev.map(|id| PrevStep {
            id: id.to_string(),
            view: view(id),
        }),
        env: env.clone(),
    }
}

/// Render a string field.
pub(crate) fn text(source: &str, scope: &Scope) -> Result<String, String> {
    Template::parse(source)
        .map_err(|e| format!("`{source}`: {e}"))?
        .render_text(scope)
        .map_err(|e| e.to_string())
}

fn texts(sources: &[String], scope: &Scope) -> Result<Vec<String>, String> {
    sources.iter().map(|s| text(s, scope)).collect()
}

fn text_map(
    sources: &BTreeMap<String, String>,
    scope: &Scope,
) -> Result<BTreeMap<String, String>, String> {
    sources
        .iter()
        .map(|(k, v)| Ok((k.clone(), text(v, scope)?)))
        .collect()
}

fn value(source: &Value, scope: &Scope) -> Result<Value, String> {
    render_value(source, scope).map_err(|e: EvalError| e.to_string())
}

fn object(source: &Map<String, Value>, scope: &Scope) -> Result<Map<String, Value>, String> {
    match value(&Value::Object(source.clone()), scope)? {
        Value::Object(map) => Ok(map),
        _ => Ok(Map::new()),
    }
}

/// The work of one attempt of `step`. `tool_override` is a fallback tool chosen by
/// a recovery. An error is a rendering problem (a `validation` failure of the step).
pub(crate) fn work(
    workflow: &Workflow,
    step: &Step,
    scope: &Scope,
    tool_override: Option<&str>,
) -> Result<Work, String> {
    performed(workflow, step, scope, tool_override).map(|(work, _)| work)
}

/// The work of one attempt of `step` and what it calls, as its start records it
/// (see [`StepCall`]): a declared or registry tool by its name and inputs, a shell,
/// http or database step by what it runs. Built-in tools and notifications call
/// nothing outside awl.
pub(crate) fn performed(
    workflow: &Workflow,
    step: &Step,
    scope: &Scope,
    tool_override: Option<&str>,
) -> Result<(Work, Option<StepCall>), String> {
    match &step.kind {
        StepKind::Tool(t) => {
            let name = tool_override.unwrap_or(&t.tool);
            let inputs = object(&t.inputs, scope)?;
            let call = StepCall {
                tool: name.to_string(),
                inputs: Value::Object(inputs.clone()),
            };
            let work = tool(workflow, name, inputs)?;
            let calls_out = !matches!(work, Work::Builtin { .. });
            Ok((work, calls_out.then_some(call)))
        }
        other => {
            let work = kind(other, scope)?;
            let call = call_of(&work);
            Ok((work, call))
        }
    }
}

/// What a shell, http or database step calls: what it runs and with what, without
/// its credentials (headers, environment).
fn call_of(work: &Work) -> Option<StepCall> {
    let (tool, inputs) = match work {
        Work::Shell(s) => {
            let mut inputs = Map::new();
            if let Some(command) = &s.command {
                inputs.insert("command".into(), json!(command));
            }
            if let Some(script) = &s.script {
                inputs.insert("script".into(), json!(script));
            }
            if !s.args.is_empty() {
                inputs.insert("args".into(), json!(s.args));
            }
            if let Some(dir) = &s.working_dir {
                inputs.insert("working_dir".into(), json!(dir));
            }
            ("shell", inputs)
        }
        Work::Http(h) => {
            let mut inputs = Map::new();
            inputs.insert("method".into(), json!(h.method));
            inputs.insert("url".into(), json!(h.url));
            if let Some(body) = &h.body {
                inputs.insert("body".into(), body.clone());
            }
            ("http", inputs)
        }
        Work::Database(d) => {
            let mut inputs = Map::new();
            inputs.insert("connection".into(), json!(d.connection));
            inputs.insert("query".into(), json!(d.query));
            inputs.insert("params".into(), json!(d.params));
            ("database", inputs)
        }
        Work::Notify(_) | Work::Builtin { .. } | Work::External { .. } => return None,
    };
    Some(StepCall {
        tool: tool.to_string(),
        inputs: Value::Object(inputs),
    })
}

/// The work of calling tool `name` with `inputs` (already rendered): a tool the
/// definition declares (its own, or one of the tools directory copied in at
/// registration) expanded into its body; a built-in; else a registry tool the worker
/// calls through the registry it was given (an MCP server's `SERVER__TOOL`: the
/// workflow was checked against a registry that knew it). Decided from the
/// definition alone, so a replay routes every call the same way.
pub(crate) fn tool(
    workflow: &Workflow,
    name: &str,
    inputs: Map<String, Value>,
) -> Result<Work, String> {
    if let Some(declared) = workflow.tools.iter().find(|t| t.header.name == name) {
        return declared_tool(declared, inputs);
    }
    let tool = name.to_string();
    Ok(if BUILTIN_TOOLS.contains(&name) {
        Work::Builtin { tool, inputs }
    } else {
        Work::External { tool, inputs }
    })
}

/// What one call of the tool a `tool` step calls costs, when the definition declares
/// it (`cost_usd` of a declared tool): charged to the run's budget when the attempt
/// reports no cost of its own. `tool_override` is a fallback tool chosen by a
/// recovery.
pub(crate) fn declared_cost(
    workflow: &Workflow,
    step: &Step,
    tool_override: Option<&str>,
) -> Option<f64> {
    let StepKind::Tool(t) = &step.kind else {
        return None;
    };
    let name = tool_override.unwrap_or(&t.tool);
    workflow
        .tools
        .iter()
        .find(|d| d.header.name == name)
        .and_then(|d| d.header.cost_usd)
        .filter(|c| *c > 0.0)
}

/// The work of calling the declared tool `declared` with `inputs` (already rendered
/// for a step; as given by a model for an agent): defaults filled in, its templates
/// rendered against its inputs alone.
pub fn declared_tool(
    declared: &ToolDefinition,
    inputs: Map<String, Value>,
) -> Result<Work, String> {
    let name = &declared.header.name;
    let mut with_defaults = inputs;
    for (input, spec) in &declared.header.inputs {
        if !with_defaults.contains_key(input) {
            match &spec.default {
                Some(default) => {
                    with_defaults.insert(input.clone(), default.clone());
                }
                None if spec.required => {
                    return Err(format!("tool `{name}` needs input `{input}`"));
                }
                None => {}
            }
        }
    }
    // A declared tool sees its own inputs, nothing of the run.
    let tool_scope = Scope {
        inputs: with_defaults,
        ..Scope::default()
    };
    kind(&declared.kind, &tool_scope)
}

fn kind(kind: &StepKind, scope: &Scope) -> Result<Work, String> {
    Ok(match kind {
        StepKind::Shell(s) => {
            let mut s = s.clone();
            if let Some(command) = &s.command {
                s.command = Some(texts(command, scope)?);
            }
            s.args = texts(&s.args, scope)?;
            s.env = text_map(&s.env, scope)?;
            s.working_dir = s
                .working_dir
                .as_deref()
                .map(|d| text(d, scope))
                .transpose()?;
            s.stdin = s.stdin.as_deref().map(|d| text(d, scope)).transpose()?;
            Work::Shell(s)
        }
        StepKind::Http(h) => {
            let mut h = h.clone();
            h.url = text(&h.url, scope)?;
            h.headers = text_map(&h.headers, scope)?;
            h.body = h.body.as_ref().map(|b| value(b, scope)).transpose()?;
            Work::Http(h)
        }
        StepKind::Database(d) => {
            let mut d = d.clone();
            d.params = d
                .params
                .iter()
                .map(|p| value(p, scope))
                .collect::<Result<_, _>>()?;
            Work::Database(d)
        }
        StepKind::Notify(n) => {
            let mut n = n.clone();
            n.message = text(&n.message, scope)?;
            n.url = n.url.as_deref().map(|u| text(u, scope)).transpose()?;
            n.mentions = texts(&n.mentions, scope)?;
            Work::Notify(n)
        }
        StepKind::Tool(t) => Work::Builtin {
            tool: t.tool.clone(),
            inputs: object(&t.inputs, scope)?,
        },
        other => {
            return Err(format!(
                "a `{}` step is not performed by a worker",
                other.type_name()
            ));
        }
    })
}
