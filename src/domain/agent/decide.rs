//! The rules of an agent's registration: register is idempotent, everything else needs
//! an active agent, and nothing is recorded when nothing changed.

use chrono::{DateTime, Utc};

use crate::domain::Decide;
use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};

use super::{Agent, AgentAction, AgentCommand, AgentError, AgentEvent, AgentStatus};

impl Decide for Agent {
    fn decide(&self, command: AgentCommand) -> Result<Vec<AgentEvent>, AgentError> {
        let action = command.action();
        match command {
            AgentCommand::Register {
                agent_id,
                capabilities,
                workspace,
                builtin,
                at,
            } => self.register(agent_id, capabilities, workspace, builtin, at),
            AgentCommand::UpdateCapabilities { capabilities, at } => {
                self.require_active(action)?;
                Ok(self.capabilities_change(capabilities, at))
            }
            AgentCommand::UpdateWorkspace { workspace, at } => {
                self.require_active(action)?;
                Ok(self.workspace_change(workspace, at))
            }
            AgentCommand::Retire { reason, at } => {
                self.require_active(action)?;
                Ok(vec![AgentEvent::Retired { reason, at }])
            }
        }
    }
}

impl Agent {
    /// A new or retired agent registers; an active one records only what differs.
    fn register(
        &self,
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        builtin: bool,
        at: DateTime<Utc>,
    ) -> Result<Vec<AgentEvent>, AgentError> {
        if let Some(stream) = &self.agent_id
            && *stream != agent_id
        {
            return Err(AgentError::WrongAgent {
                stream: stream.clone(),
                given: agent_id,
            });
        }
        if self.agent_id.is_some() && self.builtin != builtin {
            return Err(AgentError::OtherKind {
                agent: agent_id,
                builtin: self.builtin,
            });
        }
        if !self.is_active() {
            return Ok(vec![AgentEvent::Registered {
                agent_id,
                capabilities,
                workspace,
                builtin,
                at,
            }]);
        }
        let mut events = self.capabilities_change(capabilities, at);
        events.extend(self.workspace_change(workspace, at));
        Ok(events)
    }

    fn require_active(&self, action: AgentAction) -> Result<(), AgentError> {
        match (&self.agent_id, self.status) {
            (Some(_), Some(AgentStatus::Active)) => Ok(()),
            (Some(agent), Some(AgentStatus::Retired)) => Err(AgentError::Retired {
                agent: agent.clone(),
                reason: self
                    .retirement
                    .as_ref()
                    .map_or_else(String::new, |r| r.reason.clone()),
                action,
            }),
            _ => Err(AgentError::NotRegistered { action }),
        }
    }

    fn capabilities_change(
        &self,
        capabilities: Capabilities,
        at: DateTime<Utc>,
    ) -> Vec<AgentEvent> {
        if capabilities == self.capabilities {
            vec![]
        } else {
            vec![AgentEvent::CapabilitiesChanged { capabilities, at }]
        }
    }

    fn workspace_change(&self, workspace: Option<Workspace>, at: DateTime<Utc>) -> Vec<AgentEvent> {
        if workspace == self.workspace {
            vec![]
        } else {
            vec![AgentEvent::WorkspaceChanged { workspace, at }]
        }
    }
}
