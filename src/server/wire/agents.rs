//! Tools, agent definitions and solves over HTTP and MCP.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agents::AgentDefinition;
use crate::tools::{Source, Tool};

/// `POST /api/v1/solve`: ask one of awl's own agents.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SolveRequest {
    /// The agent's name (`GET /api/v1/agent-definitions`).
    pub agent: String,
    /// The question or task.
    pub prompt: String,
    /// Answer with Server-Sent Events of every phase and the reply's tokens as they
    /// come (also chosen by `Accept: text/event-stream`).
    #[serde(default)]
    pub stream: bool,
}

/// One tool of the registry.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolView {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
    pub timeout_seconds: f64,
    pub cost_usd: f64,
    /// `built-in`, `declared:FILE` or `mcp:SERVER`.
    pub source: String,
}

impl ToolView {
    pub fn of(tool: &Tool) -> Self {
        Self {
            name: tool.name.clone(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
            timeout_seconds: tool.timeout.as_secs_f64(),
            cost_usd: tool.cost_usd,
            source: source(&tool.source),
        }
    }
}

/// `built-in`, or the kind and where: `declared:FILE`, `mcp:SERVER` (from the source's
/// own serialised form, so a new kind of source shows without a change here).
pub fn source(source: &Source) -> String {
    let value = serde_json::to_value(source).unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or("unknown");
    if kind == "builtin" {
        return "built-in".into();
    }
    let place = value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "kind")
        .filter_map(|(_, v)| v.as_str())
        .next();
    match place {
        Some(p) => format!("{kind}:{p}"),
        None => kind.to_string(),
    }
}

/// One agent definition, as loaded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AgentDefinitionView {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub capabilities: Vec<String>,
    pub model: String,
    pub base_url: String,
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    pub max_iterations: u32,
    /// Whether the model's price is known (costs are counted, budgets can apply).
    pub priced: bool,
}

impl AgentDefinitionView {
    pub fn of(agent: &AgentDefinition) -> Self {
        Self {
            name: agent.name().to_string(),
            description: agent.file.description.clone(),
            capabilities: agent.file.capabilities.clone(),
            model: agent.file.model.name.clone(),
            base_url: agent.file.model.base_url.clone(),
            tools: agent.file.tools.clone(),
            budget_usd: agent.file.budget_usd,
            max_iterations: agent.max_iterations(),
            priced: agent.price.is_some(),
        }
    }
}
