//! What can be asked of an agent's registration. The actor is the agent itself (or an
//! operator acting for it), recorded in the event metadata; commands carry the time.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};

/// A request to change one agent's registration.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentCommand {
    /// Register, or register again: idempotent for an active agent (only what differs
    /// is recorded).
    Register {
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        /// One of awl's own agents (run by the built-in runner), not an external one.
        builtin: bool,
        at: DateTime<Utc>,
    },
    UpdateCapabilities {
        capabilities: Capabilities,
        at: DateTime<Utc>,
    },
    UpdateWorkspace {
        workspace: Option<Workspace>,
        at: DateTime<Utc>,
    },
    Retire {
        reason: String,
        at: DateTime<Utc>,
    },
}

impl AgentCommand {
    /// What the command attempts, for error messages.
    pub fn action(&self) -> AgentAction {
        match self {
            Self::Register { .. } => AgentAction::Register,
            Self::UpdateCapabilities { .. } => AgentAction::UpdateCapabilities,
            Self::UpdateWorkspace { .. } => AgentAction::UpdateWorkspace,
            Self::Retire { .. } => AgentAction::Retire,
        }
    }
}

/// The kind of an [`AgentCommand`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentAction {
    Register,
    UpdateCapabilities,
    UpdateWorkspace,
    Retire,
}

impl fmt::Display for AgentAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Register => "register",
            Self::UpdateCapabilities => "update its capabilities",
            Self::UpdateWorkspace => "update its workspace",
            Self::Retire => "retire",
        })
    }
}
