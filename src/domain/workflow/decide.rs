//! The rules of a workflow's versions and proposals.
//!
//! Checks run in a fixed order, so the error names the most basic problem first: the
//! workflow must exist (or the command names it and may create it) and be this stream's
//! workflow, the command's own data must make sense, a version or proposal already
//! recorded is compared next (the same content hash records nothing, another is
//! refused; both before any retirement is checked, so a loader re-registering its files
//! never fails), then retirement, then the state of the version or proposal concerned.

use serde_json::Value;

use crate::domain::Decide;
use crate::domain::ids::{ProposalId, WorkflowName};

use super::{
    Evidence, Proposal, VersionSource, WorkflowAction, WorkflowCommand, WorkflowDefinition,
    WorkflowError, WorkflowEvent,
};

impl Decide for WorkflowDefinition {
    fn decide(&self, command: WorkflowCommand) -> Result<Vec<WorkflowEvent>, WorkflowError> {
        let action = command.action();
        match command {
            WorkflowCommand::Register {
                workflow,
                version,
                definition,
                content_hash,
                by,
                at,
            } => {
                self.same_workflow(&workflow, action)?;
                let check = Check { workflow, action };
                check.object(&definition)?;
                check.not_empty("by", &by)?;
                if let Some(registered) = self.versions.get(&version) {
                    return if registered.content_hash == content_hash {
                        Ok(vec![])
                    } else {
                        Err(WorkflowError::VersionImmutable {
                            workflow: check.workflow,
                            version,
                            registered: registered.content_hash.clone(),
                            given: content_hash,
                        })
                    };
                }
                self.not_retired(&check)?;
                Ok(vec![WorkflowEvent::VersionRegistered {
                    workflow: check.workflow,
                    version,
                    definition,
                    content_hash,
                    source: VersionSource::UserSubmitted,
                    by,
                    at,
                }])
            }

            WorkflowCommand::Propose {
                workflow,
                proposal_id,
                definition,
                content_hash,
                confidence,
                evidence,
                scope,
                at,
            } => {
                self.same_workflow(&workflow, action)?;
                let check = Check { workflow, action };
                check.object(&definition)?;
                check.confidence(proposal_id, confidence)?;
                check.evidence(proposal_id, &evidence)?;
                if let Some(proposal) = self.proposals.get(&proposal_id) {
                    return if proposal.content_hash == content_hash {
                        Ok(vec![])
                    } else {
                        Err(WorkflowError::ProposalConflict {
                            workflow: check.workflow,
                            proposal: proposal_id,
                            proposed: proposal.content_hash.clone(),
                            given: content_hash,
                        })
                    };
                }
                self.not_retired(&check)?;
                let mut events: Vec<WorkflowEvent> = self
                    .proposals
                    .values()
                    .filter(|p| p.is_open() && p.scope == scope)
                    .map(|p| WorkflowEvent::ProposalSuperseded {
                        proposal_id: p.proposal_id,
                        superseded_by: proposal_id,
                        at,
                    })
                    .collect();
                events.push(WorkflowEvent::Proposed {
                    workflow: check.workflow,
                    proposal_id,
                    definition,
                    content_hash,
                    confidence,
                    evidence,
                    scope,
                    at,
                });
                Ok(events)
            }

            WorkflowCommand::ApproveProposal {
                proposal_id,
                version,
                shared,
                by,
                at,
            } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                self.not_retired(&check)?;
                let proposal = self.open_proposal(&check, proposal_id)?;
                if self.versions.contains_key(&version) {
                    return Err(WorkflowError::VersionExists {
                        workflow: check.workflow,
                        version,
                        proposal: proposal_id,
                    });
                }
                Ok(vec![
                    WorkflowEvent::ProposalApproved {
                        proposal_id,
                        version,
                        shared,
                        by: by.clone(),
                        at,
                    },
                    WorkflowEvent::VersionRegistered {
                        workflow: check.workflow,
                        version,
                        definition: proposal.definition.clone(),
                        content_hash: proposal.content_hash.clone(),
                        source: VersionSource::Learned { proposal_id },
                        by,
                        at,
                    },
                ])
            }

            WorkflowCommand::RejectProposal {
                proposal_id,
                by,
                reason,
                at,
            } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                check.not_empty("reason", &reason)?;
                // Allowed in a retired workflow: it clears the approval inbox.
                self.open_proposal(&check, proposal_id)?;
                Ok(vec![WorkflowEvent::ProposalRejected {
                    proposal_id,
                    by,
                    reason,
                    at,
                }])
            }

            WorkflowCommand::RetireVersion {
                version,
                by,
                reason,
                at,
            } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                check.not_empty("reason", &reason)?;
                self.not_retired(&check)?;
                let Some(registered) = self.versions.get(&version) else {
                    return Err(WorkflowError::UnknownVersion {
                        workflow: check.workflow,
                        version,
                        action,
                    });
                };
                if let Some(retirement) = &registered.retirement {
                    return Err(WorkflowError::VersionRetired {
                        workflow: check.workflow,
                        version,
                        action,
                        retirement: retirement.clone(),
                    });
                }
                Ok(vec![WorkflowEvent::VersionRetired {
                    version,
                    by,
                    reason,
                    at,
                }])
            }

            WorkflowCommand::RetireWorkflow { by, reason, at } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                check.not_empty("reason", &reason)?;
                self.not_retired(&check)?;
                Ok(vec![WorkflowEvent::Retired { by, reason, at }])
            }

            // Allowed in a retired workflow: its runs already started may be held.
            WorkflowCommand::Pause { by, reason, at } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                check.not_empty("reason", &reason)?;
                if let Some(hold) = &self.paused {
                    return Err(WorkflowError::AlreadyPaused {
                        workflow: check.workflow,
                        hold: hold.clone(),
                    });
                }
                Ok(vec![WorkflowEvent::Paused { by, reason, at }])
            }

            WorkflowCommand::Resume { by, at } => {
                let check = self.existing(action)?;
                check.not_empty("by", &by)?;
                if self.paused.is_none() {
                    return Err(WorkflowError::NotPaused {
                        workflow: check.workflow,
                    });
                }
                Ok(vec![WorkflowEvent::Resumed { by, at }])
            }
        }
    }
}

impl WorkflowDefinition {
    /// A command that names its workflow must name this stream's one.
    fn same_workflow(
        &self,
        given: &WorkflowName,
        action: WorkflowAction,
    ) -> Result<(), WorkflowError> {
        match &self.name {
            Some(stream) if stream != given => Err(WorkflowError::WrongWorkflow {
                stream: stream.clone(),
                given: given.clone(),
                action,
            }),
            _ => Ok(()),
        }
    }

    /// The checks of a command that needs the workflow to exist already.
    fn existing(&self, action: WorkflowAction) -> Result<Check, WorkflowError> {
        match &self.name {
            Some(workflow) => Ok(Check {
                workflow: workflow.clone(),
                action,
            }),
            None => Err(WorkflowError::NotFound { action }),
        }
    }

    fn not_retired(&self, check: &Check) -> Result<(), WorkflowError> {
        match &self.retirement {
            Some(retirement) => Err(WorkflowError::WorkflowRetired {
                workflow: check.workflow.clone(),
                action: check.action,
                retirement: retirement.clone(),
            }),
            None => Ok(()),
        }
    }

    fn open_proposal(
        &self,
        check: &Check,
        proposal_id: ProposalId,
    ) -> Result<&Proposal, WorkflowError> {
        let Some(proposal) = self.proposals.get(&proposal_id) else {
            return Err(WorkflowError::UnknownProposal {
                workflow: check.workflow.clone(),
                proposal: proposal_id,
                action: check.action,
            });
        };
        match &proposal.decision {
            None => Ok(proposal),
            Some(decision) => Err(WorkflowError::ProposalDecided {
                workflow: check.workflow.clone(),
                proposal: proposal_id,
                action: check.action,
                decision: decision.clone(),
            }),
        }
    }
}

/// The checks of a command's own data, naming the workflow and the action.
struct Check {
    workflow: WorkflowName,
    action: WorkflowAction,
}

impl Check {
    fn not_empty(&self, field: &'static str, value: &str) -> Result<(), WorkflowError> {
        if value.trim().is_empty() {
            Err(WorkflowError::Empty {
                workflow: self.workflow.clone(),
                action: self.action,
                field,
            })
        } else {
            Ok(())
        }
    }

    fn object(&self, definition: &Value) -> Result<(), WorkflowError> {
        let found = match definition {
            Value::Object(_) => return Ok(()),
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
        };
        Err(WorkflowError::DefinitionNotAnObject {
            workflow: self.workflow.clone(),
            action: self.action,
            found,
        })
    }

    fn confidence(&self, proposal: ProposalId, confidence: f64) -> Result<(), WorkflowError> {
        // NaN fails the range check too.
        if (0.0..=1.0).contains(&confidence) {
            Ok(())
        } else {
            Err(WorkflowError::ConfidenceOutOfRange {
                workflow: self.workflow.clone(),
                proposal,
                confidence,
            })
        }
    }

    fn evidence(&self, proposal: ProposalId, evidence: &Evidence) -> Result<(), WorkflowError> {
        let why = if evidence.executions == 0 {
            "a proposal is learned from at least one execution"
        } else if evidence.successes > evidence.executions {
            "there cannot be more successes than executions"
        } else {
            for name in &evidence.tool_sequence {
                self.not_empty("tool name", name)?;
            }
            return Ok(());
        };
        Err(WorkflowError::InvalidEvidence {
            workflow: self.workflow.clone(),
            proposal,
            successes: evidence.successes,
            executions: evidence.executions,
            why,
        })
    }
}
