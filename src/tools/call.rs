//! Calling a tool: the arguments checked against its schema, then the work performed
//! by the step runners (or, for an MCP tool, by its server) under the tool's timeout.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::domain::ids::RunId;
use crate::domain::run::ErrorClass;
use crate::engine::{Work, declared_tool};
use crate::runners::{Attempt, ExternalTools, Runners, StepFailure, StepSuccess};
use crate::vault::Mask;

use super::{Registry, Source, Tool};

/// Who calls, for the runners: the run (or solve) it is done for, and a key that is
/// the same when the same call is made again after a crash (`AWL_IDEMPOTENCY_KEY`).
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    pub run_id: RunId,
    pub call_key: &'a str,
    pub mask: &'a Mask,
}

/// Past the tool's own timeout, how long a runner may take to give up by itself
/// before the call is abandoned here.
const GRACE: Duration = Duration::from_secs(2);

impl Registry {
    /// Call tool `name` with `arguments` (a JSON object). Unknown tools and
    /// arguments its schema refuses fail with class `validation`, saying what and
    /// where, before anything runs. An MCP tool is checked against, and called by,
    /// its server's current listing.
    pub async fn call(
        &self,
        name: &str,
        arguments: &Value,
        ctx: CallContext<'_>,
    ) -> Result<StepSuccess, StepFailure> {
        let server = match self.get(name) {
            Some(Tool {
                source: Source::Mcp { server },
                ..
            }) => self.servers.get(server),
            Some(_) => None,
            None => self.servers.listed_server_of(name),
        };
        if let Some(server) = server {
            let tool = server.tool(name).await.ok_or_else(|| {
                StepFailure::validation(format!(
                    "tool `{name}` is no longer offered by MCP server `{}`",
                    server.name()
                ))
            })?;
            let inputs = check_arguments(&tool, arguments)?;
            return server.call(&tool, inputs).await;
        }
        let tool = self.get(name).ok_or_else(|| {
            StepFailure::validation(format!(
                "unknown tool `{name}` (tools: {})",
                self.names().join(", ")
            ))
        })?;
        let inputs = check_arguments(tool, arguments)?;
        let work = match &tool.definition {
            Some(definition) => declared_tool(definition, inputs)
                .map_err(|e| StepFailure::validation(format!("tool `{name}`: {e}")))?,
            None => Work::Builtin {
                tool: name.to_string(),
                inputs,
            },
        };
        let attempt = Attempt {
            run_id: ctx.run_id,
            step_id: name,
            attempt: 1,
            idempotency_key: ctx.call_key,
            timeout: Some(tool.timeout),
            base_dir: Path::new("."),
            mask: ctx.mask,
        };
        let performed = perform(&self.runners, &attempt, &work);
        match tokio::time::timeout(tool.timeout + GRACE, performed).await {
            Ok(result) => result,
            Err(_) => Err(StepFailure::new(
                ErrorClass::Timeout,
                format!("tool `{name}` timed out after {:?}", tool.timeout),
            )),
        }
    }
}

/// The arguments as the tool's inputs, or every problem with them.
fn check_arguments(tool: &Tool, arguments: &Value) -> Result<Map<String, Value>, StepFailure> {
    let Value::Object(inputs) = arguments else {
        return Err(StepFailure::validation(format!(
            "tool `{}` takes an object of named arguments, not {arguments}",
            tool.name
        )));
    };
    let problems: Vec<String> = tool
        .validator
        .iter_errors(arguments)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if !problems.is_empty() {
        return Err(StepFailure::validation(format!(
            "tool `{}`: {}",
            tool.name,
            problems.join("; ")
        )));
    }
    Ok(inputs.clone())
}

async fn perform(
    runners: &Runners,
    attempt: &Attempt<'_>,
    work: &Work,
) -> Result<StepSuccess, StepFailure> {
    match work {
        Work::Shell(step) => runners.shell(attempt, step).await,
        Work::Http(step) => runners.http(attempt, step).await,
        Work::Database(step) => runners.database(attempt, step).await,
        Work::Notify(step) => runners.notify(attempt, step).await,
        Work::Builtin { tool, inputs } => runners.builtin_tool(attempt, tool, inputs).await,
        // A declared tool's body is a shell, http, database or notify step.
        Work::External { tool, .. } => Err(StepFailure::validation(format!(
            "tool `{tool}` is not performed by the runners"
        ))),
    }
}

/// The registry as the executor's performer of registry tools: the MCP tools a
/// workflow's `tool` steps call. Tools of the tools directory never come here: they
/// are copied into the workflow version at registration and performed from that copy
/// (`crate::definitions`), so a run does not depend on what the directory holds now.
#[async_trait::async_trait]
impl ExternalTools for Registry {
    async fn call(
        &self,
        attempt: &Attempt<'_>,
        tool: &str,
        inputs: &Map<String, Value>,
    ) -> Result<StepSuccess, StepFailure> {
        self.call_for_step(attempt, tool, inputs).await
    }
}

impl Registry {
    /// One attempt of a workflow step calling MCP tool `name`: its server's current
    /// listing (the session started again if it ended), the inputs checked against
    /// the listed schema (`validation`), then the call under the attempt's timeout
    /// (the step's `timeout_seconds`, or what an `increase_timeout` handler made it),
    /// else the server's `timeout_seconds`. Its cost is the server's `cost_usd`.
    async fn call_for_step(
        &self,
        attempt: &Attempt<'_>,
        name: &str,
        inputs: &Map<String, Value>,
    ) -> Result<StepSuccess, StepFailure> {
        let server = match self.get(name) {
            Some(Tool {
                source: Source::Mcp { server },
                ..
            }) => self.servers.get(server),
            _ => self.servers.declared_server_of(name),
        };
        let Some(server) = server else {
            let servers = self.mcp_servers();
            return Err(StepFailure::new(
                ErrorClass::Dependency,
                format!(
                    "tool `{name}` is not a tool of an MCP server of this worker's tools \
                     directory (its MCP servers: {})",
                    if servers.is_empty() {
                        "none".to_string()
                    } else {
                        servers.join(", ")
                    }
                ),
            ));
        };
        let mut tool = server.tool_for_step(name).await?;
        let arguments = check_arguments(&tool, &Value::Object(inputs.clone()))?;
        if let Some(limit) = attempt.timeout {
            tool.timeout = limit;
        }
        let mut success = server.call(&tool, arguments).await?;
        if tool.cost_usd > 0.0 {
            success.cost_usd = Some(tool.cost_usd);
        }
        Ok(success)
    }
}
