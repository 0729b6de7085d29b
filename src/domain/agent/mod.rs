//! The `agent` stream: one agent's registration, capabilities and workspace.
//!
//! Agents are external processes that pull work from the board. The board matches a
//! task to an agent on what this stream records: the capabilities the agent offers and
//! the repository and branch it works in (metadata only; the server never touches the
//! agent's files). Registering is idempotent, so an agent can simply register every
//! time it starts: only what changed is recorded. Heartbeats are not events (they
//! would flood the log); liveness is tracked outside the stream.
//!
//! `agent.registered` changed shape once; old payloads load through
//! [`REGISTERED_V1_TO_V2`].

mod commands;
mod decide;
mod error;
mod events;
#[cfg(test)]
mod tests;
mod upcast;

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};

pub use commands::{AgentAction, AgentCommand};
pub use error::AgentError;
pub use events::{AgentEvent, REGISTERED_VERSION};
pub use upcast::REGISTERED_V1_TO_V2;

/// Whether a registered agent takes work. An agent that never registered has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgentStatus {
    Active,
    Retired,
}

impl AgentStatus {
    pub const ALL: [AgentStatus; 2] = [Self::Active, Self::Retired];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Retired => "RETIRED",
        }
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why and when an agent was retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retirement {
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// One agent: the state folded from its stream.
///
/// Fields are private so the state only changes through `apply`; read it through the
/// accessors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    agent_id: Option<AgentId>,
    status: Option<AgentStatus>,
    capabilities: Capabilities,
    workspace: Option<Workspace>,
    retirement: Option<Retirement>,
    registered_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
    /// One of awl's own agents.
    #[serde(default)]
    builtin: bool,
}

impl Agent {
    /// The agent's name, once it registered.
    pub fn id(&self) -> Option<&AgentId> {
        self.agent_id.as_ref()
    }

    /// `None` before the agent ever registered.
    pub fn status(&self) -> Option<AgentStatus> {
        self.status
    }

    /// Registered and not retired: it may be given work.
    pub fn is_active(&self) -> bool {
        self.status == Some(AgentStatus::Active)
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    pub fn workspace(&self) -> Option<&Workspace> {
        self.workspace.as_ref()
    }

    /// Why the agent was retired, while it is.
    pub fn retirement(&self) -> Option<&Retirement> {
        self.retirement.as_ref()
    }

    /// When the agent last registered (a re-registration after retirement resets it).
    pub fn registered_at(&self) -> Option<DateTime<Utc>> {
        self.registered_at
    }

    /// The time of the last event.
    pub fn updated_at(&self) -> Option<DateTime<Utc>> {
        self.updated_at
    }
}

crate::domain::impl_aggregate!(Agent, "agent", AgentCommand, AgentEvent, AgentError);

impl Agent {
    /// One of awl's own agents (run by the built-in runner).
    pub fn is_builtin(&self) -> bool {
        self.builtin
    }
}

impl Agent {
    /// Fold one event into the state (`Aggregate::apply`): it records what happened and
    /// never fails, since `decide` already refused whatever was not allowed.
    fn apply_event(&mut self, event: AgentEvent) {
        self.updated_at = Some(event.at());
        match event {
            AgentEvent::Registered {
                agent_id,
                capabilities,
                workspace,
                builtin,
                at,
            } => {
                *self = Agent {
                    agent_id: Some(agent_id),
                    status: Some(AgentStatus::Active),
                    capabilities,
                    workspace,
                    retirement: None,
                    registered_at: Some(at),
                    updated_at: Some(at),
                    builtin,
                };
            }
            AgentEvent::CapabilitiesChanged { capabilities, .. } => {
                self.capabilities = capabilities;
            }
            AgentEvent::WorkspaceChanged { workspace, .. } => {
                self.workspace = workspace;
            }
            AgentEvent::Retired { reason, at } => {
                self.status = Some(AgentStatus::Retired);
                self.retirement = Some(Retirement { reason, at });
            }
        }
    }
}
