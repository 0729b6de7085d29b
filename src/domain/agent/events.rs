//! The events of an `agent` stream: a permanent wire format.
//!
//! Each variant's serde tag is its dotted event type (`agent.registered`), which the
//! store keeps as the row's event type while the inner object becomes the payload.
//! `agent.registered` is at schema version 2; version 1 loads through
//! [`REGISTERED_V1_TO_V2`](super::REGISTERED_V1_TO_V2).

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};

/// The schema version of `agent.registered` written today.
pub const REGISTERED_VERSION: i32 = 2;

/// Something that happened to one agent's registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentEvent {
    /// The agent registered (for the first time, or again after it was retired).
    #[serde(rename = "agent.registered")]
    Registered {
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        /// One of awl's own agents (absent: an external one).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        builtin: bool,
        at: DateTime<Utc>,
    },
    /// The agent now offers a different set of capabilities.
    #[serde(rename = "agent.capabilities_changed")]
    CapabilitiesChanged {
        capabilities: Capabilities,
        at: DateTime<Utc>,
    },
    /// The agent moved to another repository or branch (or left any).
    #[serde(rename = "agent.workspace_changed")]
    WorkspaceChanged {
        workspace: Option<Workspace>,
        at: DateTime<Utc>,
    },
    /// The agent no longer takes work.
    #[serde(rename = "agent.retired")]
    Retired { reason: String, at: DateTime<Utc> },
}

impl AgentEvent {
    /// When the event happened (the time carried by the command that caused it).
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Registered { at, .. }
            | Self::CapabilitiesChanged { at, .. }
            | Self::WorkspaceChanged { at, .. }
            | Self::Retired { at, .. } => *at,
        }
    }
}

impl DomainEvent for AgentEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Registered { .. } => "agent.registered",
            Self::CapabilitiesChanged { .. } => "agent.capabilities_changed",
            Self::WorkspaceChanged { .. } => "agent.workspace_changed",
            Self::Retired { .. } => "agent.retired",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        match self {
            Self::Registered { .. } => REGISTERED_VERSION.to_string(),
            Self::CapabilitiesChanged { .. }
            | Self::WorkspaceChanged { .. }
            | Self::Retired { .. } => "1".to_string(),
        }
    }
}
