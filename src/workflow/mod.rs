//! The workflow language: YAML files (`workflows/*.awl.yaml`) checked against a
//! published JSON Schema and the rules of `rules.rs`, with every problem reported at
//! its file, line, column and field.
//!
//! | module | what it holds |
//! |---|---|
//! | `model` | the Rust types of a workflow file (the one definition of the language); `model::index`, what the engine asks of a loaded definition's steps on every tick, worked out once |
//! | `schema` | the JSON Schema generated from them, published in `workflows/` |
//! | `yaml` | YAML to JSON with the position of every value |
//! | `validate` | schema pass + rules pass, all problems at once |
//! | `rules` | what a schema cannot say: ids, references, tools, text without templates |
//! | [`KnownTools`] | the tools of the registry in use a file may name, handed in as data |
//! | `inputs` | a run's inputs checked and defaulted against the declaration |
//! | `schedule` | schedules: their spec, cron and interval times, jitter |
//! | `diagnostics` | a problem: file, line, column, field, message |
//!
//! Pure code except [`load`], which reads a file, and one rule: a `workflow` step
//! naming a file is checked to have that file next to the workflow file.

pub mod diagnostics;
pub mod flow;
pub mod inputs;
pub mod model;
mod rules;
pub mod schedule;
pub mod schema;
pub mod validate;
pub mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use diagnostics::{Diagnostic, Diagnostics};
pub use model::Workflow;
pub use validate::{CheckedWorkflow, FileSchema, check_file, check_tools, check_with, problem_at};

use model::{Step, ToolDefinition};

/// The built-in tools `tool` steps may name without declaring them.
pub const BUILTIN_TOOLS: [&str; 4] = ["echo", "fail", "noop", "sleep"];

pub(crate) fn builtin_tools() -> Vec<&'static str> {
    BUILTIN_TOOLS.to_vec()
}

/// The tools a workflow file may name besides the built-ins and its own `tools:`: those
/// of the tool registry in use (`crate::tools`), handed in as data, because the
/// language is checked before anything runs and knows no registry (or MCP server).
///
/// A name the file declares itself is the file's own tool, whatever the registry
/// holds: a file's declaration wins over a tools directory's of the same name.
#[derive(Debug, Clone, Default)]
pub struct KnownTools {
    /// Tools declared in the tools directory. A workflow that names one is registered
    /// with its declaration copied into its own `tools:` (as if the file declared
    /// it), so its runs replay the same whatever the directory holds later.
    pub declared: BTreeMap<String, Arc<ToolDefinition>>,
    /// Tools awl performs outside its runners, through the registry, when a step
    /// calls them: the tools of external MCP servers (`SERVER__TOOL`).
    pub external: BTreeSet<String>,
}

impl KnownTools {
    /// Every name, for the rules and their messages.
    pub fn names(&self) -> BTreeSet<String> {
        self.declared
            .keys()
            .chain(&self.external)
            .cloned()
            .collect()
    }
}

/// The tools `workflow` names: in `tool` steps anywhere (nested, hooks,
/// compensations) and in error handlers (`fallback_tool`, `hook`), the step's and the
/// workflow's. Its own `tools:` declarations count only where named.
pub fn tools_named(workflow: &Workflow) -> BTreeSet<String> {
    fn handlers(list: &[model::ErrorHandler], out: &mut BTreeSet<String>) {
        for h in list {
            out.extend(h.fallback_tool.iter().cloned());
            out.extend(h.hook.iter().cloned());
        }
    }
    fn step(s: &Step, out: &mut BTreeSet<String>) {
        if let model::StepKind::Tool(t) = &s.kind {
            out.insert(t.tool.clone());
        }
        handlers(&s.common.error_handlers, out);
        if let Some(undo) = &s.common.compensate {
            step(undo, out);
        }
        for child in s.children() {
            step(child, out);
        }
    }
    let mut out = BTreeSet::new();
    handlers(&workflow.error_handlers, &mut out);
    for s in workflow
        .steps
        .iter()
        .chain(&workflow.on_success)
        .chain(&workflow.on_failure)
    {
        step(s, &mut out);
    }
    out
}

/// Whether a `workflow` step's `workflow` names a file, relative to the workflow
/// file (`./child.awl.yaml`), rather than a registered workflow: it ends in `.yaml`
/// or `.yml`, or has a `/`.
pub fn names_a_file(target: &str) -> bool {
    target.ends_with(".yaml") || target.ends_with(".yml") || target.contains('/')
}

/// The JSON pointers of every step in a workflow file's JSON form: the steps, the
/// steps nested in them (`if_true`, `if_false`, `branches`), the hooks and the
/// compensations. The one walk over a file's steps, for whoever needs to visit them.
pub fn step_pointers(json: &serde_json::Value) -> Vec<String> {
    rules::steps(json).into_iter().map(|s| s.pointer).collect()
}

/// The `*.yaml` and `*.yml` files of `dir` (not below it), in name order: the
/// declarations of a tools or agents directory.
pub fn yaml_files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// A workflow file read from disk and checked.
#[derive(Debug, Clone)]
pub struct LoadedWorkflow {
    pub path: PathBuf,
    pub source: String,
    pub checked: CheckedWorkflow,
}

impl LoadedWorkflow {
    pub fn workflow(&self) -> &Workflow {
        &self.checked.workflow
    }
}

/// Read and check one workflow file (its tools: the built-ins and its own).
pub fn load(path: &Path) -> Result<LoadedWorkflow, Diagnostics> {
    load_with(path, &KnownTools::default())
}

/// Read and check one workflow file, which may also name the tools of `known`.
pub fn load_with(path: &Path, known: &KnownTools) -> Result<LoadedWorkflow, Diagnostics> {
    let source = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        }])
    })?;
    let checked = validate::check_with(path, &source, known)?;
    Ok(LoadedWorkflow {
        path: path.to_path_buf(),
        source,
        checked,
    })
}

#[cfg(test)]
mod tests;
