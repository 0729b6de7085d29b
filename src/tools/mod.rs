//! The tool registry: every tool awl can call, behind one list, for every caller: the
//! agent runner, workflows' `tool` steps (and `fallback_tool`s), `awl tools`, and
//! `GET /api/v1/tools`.
//!
//! A tool has a name, a description, the JSON Schema of its input (what a model is
//! shown, and what every call is checked against before anything runs), a timeout, a
//! cost per call, and where it comes from:
//!
//! - **built-in**: `noop`, `echo`, `sleep`, `fail` (the runners' own);
//! - **declared**: a `tools:` list in a YAML file of the tools directory, in the same
//!   form as a workflow file's `tools:` (a `shell`, `http`, `database` or `notify`
//!   body whose templates read the call's `inputs`), checked like a workflow file,
//!   every problem at its line and column;
//! - **MCP**: the tools of the external MCP servers an `mcp_servers:` list of those
//!   files declares (`mcp.rs`), as `SERVER__TOOL`, with the description and input
//!   schema the server lists. They join the registry when it is discovered
//!   ([`Registry::discover`], [`Registry::load_with_mcp`]); [`Registry::load`] alone
//!   starts no server.
//!
//! A `Registry` is a snapshot: [`Registry::get`] and [`Registry::list`] answer from
//! the listings it was made with. A call of an MCP tool always goes by its server's
//! current listing (asked for again once older than the server's `refresh_seconds`);
//! [`Registry::current`] and [`Registry::refresh`] give a newer snapshot.
//!
//! A call is performed by the step runners, so it keeps their rules: values reach a
//! process as argv or stdin, never shell text; output is capped; the timeout kills the
//! process group; every failure has an error class (`validation` for arguments the
//! schema refuses), which the agent runner hands back to the model and a workflow's
//! recovery strategies act on. An MCP tool is called through its server's session
//! (one per server, kept open; a stdio server's process is killed when the last
//! clone of the registry is dropped).
//!
//! Workflows reach the registry in two ways, so that a run replays the same whatever
//! the tools directory holds later:
//!
//! - **checking and registering**: [`Registry::known_tools`] hands the workflow
//!   checks (`crate::workflow`, which knows no registry) the names a file may use
//!   besides the built-ins and its own `tools:`; registration copies the declaration
//!   of every directory tool a file names into the registered version
//!   (`crate::definitions`), and the engine performs that copy like a tool the file
//!   declared (a file's own declaration wins over a directory tool of the same
//!   name);
//! - **running MCP tools**: a step calling `SERVER__TOOL` is performed by the worker
//!   through the registry it was given (the [`ExternalTools`] impl in `call.rs`): the
//!   server's current listing, the inputs checked against the listed schema, the
//!   step's timeout (else the server's), the server's cost charged to the run, and
//!   failures classed (an error result, a server that died or cannot be reached, a
//!   timeout) for the workflow's error handlers.

mod call;
mod mcp;
mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::runners::Runners;
use crate::workflow::model::{McpServerSpec, ToolDefinition, ToolsFile};
use crate::workflow::{Diagnostic, Diagnostics, KnownTools, check_tools};

#[cfg(doc)]
use crate::runners::ExternalTools;

pub use call::CallContext;
pub use mcp::{McpStartError, SEPARATOR};

/// A call's timeout when its tool declares none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Builtin,
    Declared {
        file: PathBuf,
    },
    /// Listed by the MCP server of that name.
    Mcp {
        server: String,
    },
}

impl std::fmt::Display for Source {
    /// `built-in`, `declared:FILE` or `mcp:SERVER`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Builtin => f.write_str("built-in"),
            Source::Declared { file } => write!(f, "declared:{}", file.display()),
            Source::Mcp { server } => write!(f, "mcp:{server}"),
        }
    }
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
    /// An MCP tool's name on its server.
    #[serde(skip)]
    remote_name: Option<String>,
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
    /// MCP servers that could not be started or listed, each with why.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Mcp(Vec<McpStartError>),
}

/// Every tool, by name. Cheap to clone (clones share the MCP servers' sessions).
#[derive(Debug, Clone)]
pub struct Registry {
    tools: Arc<BTreeMap<String, Tool>>,
    runners: Runners,
    servers: mcp::Servers,
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
            servers: mcp::Servers::default(),
        }
    }

    /// The built-ins and every tool declared in the `*.yaml` / `*.yml` files of `dir`
    /// (files in name order; every problem of every file at once; a name declared
    /// twice, or a built-in's name, is a problem at the second declaration). The MCP
    /// servers the files declare are checked and kept, but not started: their tools
    /// join with [`Registry::discover`].
    pub fn load(dir: &Path, runners: Runners) -> Result<Self, RegistryError> {
        let mut registry = Self::builtins(runners);
        let files = yaml_files(dir)?;
        let mut problems = Vec::new();
        let mut tools = (*registry.tools).clone();
        let mut servers: BTreeMap<String, (PathBuf, McpServerSpec)> = BTreeMap::new();
        for file in files {
            match read(&file) {
                Ok(declared) => {
                    for definition in declared.tools {
                        let name = definition.header.name.clone();
                        if let Some(first) = tools.get(&name) {
                            problems.push(duplicate(&file, &name, &first.source));
                            continue;
                        }
                        tools.insert(name, schema::declared(&file, definition));
                    }
                    for server in declared.mcp_servers {
                        if let Some((first, _)) = servers.get(&server.name) {
                            problems.push(Diagnostic {
                                file: file.clone(),
                                position: Default::default(),
                                field: "mcp_servers".into(),
                                message: format!(
                                    "MCP server `{}` is already declared in {}; choose another name",
                                    server.name,
                                    first.display()
                                ),
                            });
                            continue;
                        }
                        servers.insert(server.name.clone(), (file.clone(), server));
                    }
                }
                Err(found) => problems.extend(found.0),
            }
        }
        if !problems.is_empty() {
            return Err(RegistryError::Invalid(Diagnostics(problems)));
        }
        registry.tools = Arc::new(tools);
        registry.servers = mcp::Servers::new(servers.into_values());
        Ok(registry)
    }

    /// [`Registry::load`], then [`Registry::discover`]: the registry with the tools of
    /// every MCP server the files declare.
    pub async fn load_with_mcp(dir: &Path, runners: Runners) -> Result<Self, RegistryError> {
        Self::load(dir, runners)?.discover().await
    }

    /// This registry with the tools of every MCP server its files declare: each
    /// server started (a process for `command`, a session for `url`) unless it runs
    /// already, and its tools listed unless its listing is fresh. A server that
    /// cannot be started or listed is an error naming it (every such server at once).
    pub async fn discover(&self) -> Result<Self, RegistryError> {
        self.with_listings(mcp::Want::Fresh).await
    }

    /// This registry with every MCP server's tools listed again now, whatever their
    /// age; a server whose session ended is started again.
    pub async fn refresh(&self) -> Result<Self, RegistryError> {
        self.with_listings(mcp::Want::Now).await
    }

    /// This registry with the tools of every MCP server that can be started and
    /// listed (as [`Registry::discover`]), and why each other one could not be: its
    /// tools are left out. For checking workflow files, where a server a file does
    /// not use need not be up.
    pub async fn discover_available(&self) -> (Self, Vec<McpStartError>) {
        let mut listings = Vec::new();
        let mut failed = Vec::new();
        for (server, listed) in self.servers.listings(mcp::Want::Fresh).await {
            match listed {
                Ok(listing) => listings.push(listing),
                Err(e) => {
                    failed.push(e);
                    listings.extend(self.servers.last_listing(&server));
                }
            }
        }
        (self.with(listings), failed)
    }

    /// This registry with the listings older than their server's `refresh_seconds`
    /// asked for again. A server that cannot be reached keeps its last listing (the
    /// failure is logged; its calls fail on their own).
    pub async fn current(&self) -> Self {
        let listings = self.servers.listings(mcp::Want::Fresh).await;
        let listings = listings
            .into_iter()
            .filter_map(|(server, listed)| match listed {
                Ok(listing) => Some(listing),
                Err(e) => {
                    tracing::warn!(server, error = %e, "an MCP server's tools could not be listed again");
                    self.servers.last_listing(&server)
                }
            })
            .collect();
        self.with(listings)
    }

    async fn with_listings(&self, want: mcp::Want) -> Result<Self, RegistryError> {
        let mut listings = Vec::new();
        let mut failed = Vec::new();
        for (_, listed) in self.servers.listings(want).await {
            match listed {
                Ok(listing) => listings.push(listing),
                Err(e) => failed.push(e),
            }
        }
        if !failed.is_empty() {
            return Err(RegistryError::Mcp(failed));
        }
        Ok(self.with(listings))
    }

    /// This registry's built-in and declared tools with `listings`' MCP tools (a
    /// name taken already is left out, and logged).
    fn with(&self, listings: Vec<Arc<mcp::Listing>>) -> Self {
        let mut tools: BTreeMap<String, Tool> = self
            .tools
            .iter()
            .filter(|(_, t)| !matches!(t.source, Source::Mcp { .. }))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        for listing in listings {
            for (name, tool) in &listing.tools {
                if let Some(first) = tools.get(name) {
                    tracing::warn!(
                        tool = %name,
                        first = %first.source,
                        "an MCP tool is left out: its name is taken"
                    );
                    continue;
                }
                tools.insert(name.clone(), tool.clone());
            }
        }
        Self {
            tools: Arc::new(tools),
            runners: self.runners.clone(),
            servers: self.servers.clone(),
        }
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

    /// The names of the MCP servers the tools files declare.
    pub fn mcp_servers(&self) -> Vec<&str> {
        self.servers.names()
    }

    /// What a workflow file may name of this registry besides the built-ins, as data
    /// for the workflow checks: the declared tools (copied into a version that names
    /// one, at registration) and the MCP tools listed so far (called through the
    /// registry when a step runs).
    pub fn known_tools(&self) -> KnownTools {
        let mut known = KnownTools::default();
        for (name, tool) in self.tools.iter() {
            match (&tool.source, &tool.definition) {
                (Source::Declared { .. }, Some(definition)) => {
                    known.declared.insert(name.clone(), Arc::clone(definition));
                }
                (Source::Mcp { .. }, _) => {
                    known.external.insert(name.clone());
                }
                _ => {}
            }
        }
        known
    }
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    crate::workflow::yaml_files_in(dir).map_err(|source| RegistryError::Directory {
        dir: dir.to_path_buf(),
        source,
    })
}

fn read(file: &Path) -> Result<ToolsFile, Diagnostics> {
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
        Source::Mcp { server } => format!("a tool of MCP server `{server}`"),
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
