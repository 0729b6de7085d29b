//! The tool registry as the commands that check, register and run workflows use it
//! (`awl validate`, `awl run`, `awl rerun`, `awl worker`): the tools directory's
//! tools (`--tools-dir`, `AWL_TOOLS_DIR`, else `./tools` when it exists) and its MCP
//! servers' tools, which a workflow's `tool` steps and `fallback_tool`s may name.
//!
//! MCP servers are started only when they are needed: a workflow file is checked first
//! with the tools the directory declares; only when that finds problems and the
//! directory declares MCP servers are their tools listed (the servers started; one
//! that cannot be is said and its tools left out) and the file checked again. A worker
//! starts a server's session at its first call.

use std::sync::Arc;

use crate::runners::ExternalTools;
use crate::tools::Registry;
use crate::workflow::KnownTools;

use super::agents::Declarations;

/// The registry a command checks workflows against and gives its worker.
pub(super) struct WorkflowTools {
    registry: Registry,
}

impl WorkflowTools {
    /// The built-ins and the tools directory's tools; its MCP servers declared, not
    /// started.
    pub fn load(declarations: &Declarations) -> anyhow::Result<Self> {
        Ok(Self {
            registry: declarations.registry()?,
        })
    }

    /// What performs the registry tools (MCP tools) of the runs a worker carries out.
    pub fn performer(&self) -> Arc<dyn ExternalTools> {
        Arc::new(self.registry.clone())
    }

    /// `check` with what the registry knows; when `invalid` says it found problems
    /// and the tools directory declares MCP servers, `check` again once their tools
    /// are listed (a server that cannot be listed is said on stderr).
    pub async fn check<T, E>(
        &mut self,
        invalid: impl Fn(&E) -> bool,
        check: impl AsyncFn(&KnownTools) -> Result<T, E>,
    ) -> Result<T, E> {
        let first = check(&self.registry.known_tools()).await;
        match first {
            Err(e) if invalid(&e) && !self.registry.mcp_servers().is_empty() => {
                let (discovered, failed) = self.registry.discover_available().await;
                self.registry = discovered;
                let again = check(&self.registry.known_tools()).await;
                if again.is_err() {
                    for e in failed {
                        eprintln!("note: {e}; its tools are unknown here");
                    }
                }
                again
            }
            other => other,
        }
    }
}
