//! What deciding a proposal and asking for a suggestion take, and the list of
//! suggestions as REST and MCP give it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::domain::learning::Context;
use crate::learning::Suggestion;
use crate::server::error::ApiError;

/// Approve a proposal: its workflow becomes a registered, runnable learned version.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveProposalRequest {
    /// Suggest it to every scope, not only the team or user it was learned from.
    #[serde(default)]
    pub shared: bool,
}

/// Reject a proposal, saying why.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectProposalRequest {
    pub reason: String,
}

/// A context to suggest workflows for: the last tool calls of a session, or a task's
/// prompt and capabilities (any of them; at least one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestRequest {
    /// The tools called so far, oldest first.
    #[serde(default)]
    pub tools: Vec<String>,
    /// What is to be done, in words.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The capabilities the work needs.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The confidence a learned workflow needs, 0 to 1 (default 0.8).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// At most this many, 1 to 50 (default 5).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl SuggestRequest {
    pub fn context(&self) -> Context {
        Context {
            tools: self.tools.clone(),
            prompt: self.prompt.clone(),
            capabilities: self.capabilities.clone(),
        }
    }

    /// The number asked for, 5 by default; outside 1 to 50 it is refused.
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(5),
            Some(n @ 1..=50) => Ok(n),
            Some(n) => Err(ApiError::invalid(format!(
                "limit {n} is not between 1 and 50"
            ))),
        }
    }
}

/// The workflows that fit a context, best first: ones people submitted before learned
/// ones; learned ones only of the caller's scope or shared. Start one with `start_run`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SuggestionList {
    pub suggestions: Vec<Suggestion>,
}
