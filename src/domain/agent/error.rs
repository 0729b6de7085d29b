//! Why a command on an agent was refused.

use crate::domain::ids::AgentId;

use super::commands::AgentAction;

/// A refused agent command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error("the agent is not registered: cannot {action} (an agent must register first)")]
    NotRegistered { action: AgentAction },

    #[error(
        "agent {agent} is retired ({reason}): cannot {action} (register it again to bring it back)"
    )]
    Retired {
        agent: AgentId,
        reason: String,
        action: AgentAction,
    },

    #[error("this stream belongs to agent {stream}: cannot register agent {given} on it")]
    WrongAgent { stream: AgentId, given: AgentId },

    #[error(
        "agent {agent} is {}: the name cannot be registered as {} (choose another name)",
        if *builtin { "one of awl's own agents" } else { "an external agent" },
        if *builtin { "an external agent" } else { "one of awl's own agents" }
    )]
    OtherKind { agent: AgentId, builtin: bool },
}
