//! The workflow language: YAML files (`workflows/*.awl.yaml`) checked against a
//! published JSON Schema and the rules of `rules.rs`, with every problem reported at
//! its file, line, column and field.
//!
//! | module | what it holds |
//! |---|---|
//! | `model` | the Rust types of a workflow file (the one definition of the language) |
//! | `schema` | the JSON Schema generated from them, published in `workflows/` |
//! | `yaml` | YAML to JSON with the position of every value |
//! | `validate` | schema pass + rules pass, all problems at once |
//! | `rules` | what a schema cannot say: ids, references, tools, text without templates |
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

use std::path::{Path, PathBuf};

pub use diagnostics::{Diagnostic, Diagnostics};
pub use model::Workflow;
pub use validate::{CheckedWorkflow, FileSchema, check_file, check_tools, problem_at};

/// The built-in tools `tool` steps may name without declaring them.
pub const BUILTIN_TOOLS: [&str; 4] = ["echo", "fail", "noop", "sleep"];

pub(crate) fn builtin_tools() -> Vec<&'static str> {
    BUILTIN_TOOLS.to_vec()
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

/// Read and check one workflow file.
pub fn load(path: &Path) -> Result<LoadedWorkflow, Diagnostics> {
    let source = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        }])
    })?;
    let checked = validate::check(path, &source)?;
    Ok(LoadedWorkflow {
        path: path.to_path_buf(),
        source,
        checked,
    })
}

#[cfg(test)]
mod tests;
