//! The tool registry: every tool awl can call, behind one list, for every caller (the
//! agent runner, `awl tools`, `GET /api/v1/tools`).
//!
//! A tool has a name, a description, the JSON Schema of its input (what a model is
//! shown, and what every call is checked against before anything runs), a timeout, a
//! cost per call, and where it comes from:
//!
//! - **built-in**: `noop`, `echo`, `sleep`, `fail` (the runners' own);
//! - **declared**: a `tools:` list in a YAML file of the tools directory, in the same
//!   form as a workflow file's `tools:` (a `shell`, `http`, `database` or `notify`
//!   body whose templates read the call's `inputs`), checked like a workflow file,
//!   every problem at its line and column.
//!
//! A call is performed by the step runners, so it keeps their rules: values reach a
//! process as argv or stdin, never shell text; output is capped; the timeout kills the
//! process group; every failure has an error class (`validation` for arguments the
//! schema refuses), which the agent runner hands back to the model and a workflow's
//! recovery strategies act on.

mod call;
mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::runners::Runners;
use crate::workflow::model::ToolDefinition;
use crate::workflow::{Diagnostic, Diagnostics, check_tools};

pub use call::CallContext;

/// A call's timeout when its tool declares none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Builtin,
    Declared { file: PathBuf },
}

/// One tool of the registry.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// The JSON Schema of the input: an object of named arguments.
    pub input_schema: Value,
    #[serde(serialize_with = "seconds")]
    pub timeout: Duration,
    pub cost_usd: f64,
    pub source: Source,
    #[serde(skip)]
    definition: Option<Arc<ToolDefinition>>,
    #[serde(skip)]
    validator: Arc<jsonschema::Validator>,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Why the registry could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read the tools directory {dir}: {source}")]
    Directory {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// Every tool, by name. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Registry {
    tools: Arc<BTreeMap<String, Tool>>,
    runners: Runners,
}

impl Registry {
    /// The built-in tools only.
    pub fn builtins(runners: Runners) -> Self {
        let tools = schema::builtins()
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        Self {
            tools: Arc::new(tools),
            runners,
        }
    }

    /// The built-ins and every tool declared in the `*.yaml` / `*.yml` files of `dir`
    /// (files in name order; every problem of every file at once; a name declared
    /// twice, or a built-in's name, is a problem at the second declaration).
    pub fn load(dir: &Path, runners: Runners) -> Result<Self, RegistryError> {
        let mut registry = Self::builtins(runners);
        let files = yaml_files(dir)?;
        let mut problems = Vec::new();
        let mut tools = (*registry.tools).clone();
        for file in files {
            match read(&file) {
                Ok(declared) => {
                    for definition in declared {
                        let name = definition.header.name.clone();
                        if let Some(first) = tools.get(&name) {
                            problems.push(duplicate(&file, &name, &first.source));
                            continue;
                        }
                        tools.insert(name, schema::declared(&file, definition));
                    }
                }
                Err(found) => problems.extend(found.0),
            }
        }
        if !problems.is_empty() {
            return Err(RegistryError::Invalid(Diagnostics(problems)));
        }
        registry.tools = Arc::new(tools);
        Ok(registry)
    }

    /// Every tool, by name.
    pub fn list(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// The names of every tool, for messages.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let entries = std::fs::read_dir(dir).map_err(|source| RegistryError::Directory {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn read(file: &Path) -> Result<Vec<ToolDefinition>, Diagnostics> {
    let source = std::fs::read_to_string(file).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        }])
    })?;
    check_tools(file, &source)
}

fn duplicate(file: &Path, name: &str, first: &Source) -> Diagnostic {
    let where_first = match first {
        Source::Builtin => "a built-in tool".to_string(),
        Source::Declared { file } => format!("declared in {}", file.display()),
    };
    Diagnostic {
        file: file.to_path_buf(),
        position: Default::default(),
        field: "tools".into(),
        message: format!("tool `{name}` is already {where_first}; choose another name"),
    }
}

#[cfg(test)]
mod tests;
