//! The plan-execute-solve loop: what [`Solve::next`] says, done, and recorded on the
//! solve's stream before the next step is chosen.
//!
//! - **Plan / solve**: the conversation is rebuilt from the stream (so a restarted
//!   runner sends what the first one would have), the budget is checked against the
//!   most the call could cost (prompt tokens bounded from the last reply's count and
//!   the bytes added since, the reply bounded by `max_tokens`, lowered to fit what is
//!   left), the model is called, and its reply recorded.
//! - **Execute**: the calls of the last reply that are not yet recorded run side by
//!   side, each checked first (an allowed tool, arguments that are JSON), each
//!   recorded as it ends; a failing call is recorded with its error class and handed
//!   back to the model, which may try something else.
//! - A model that cannot be reached (after the client's retries), a budget that does
//!   not cover the next call, and a model that will not stop calling tools end the
//!   solve with `solve.failed` and the error's class.

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::domain::run::ErrorClass;
use crate::domain::solve::{
    ModelReply, Next, Phase, PlannedCall, Solve, SolveCommand, ToolOutcome, ToolResult,
};
use crate::models::{ChatRequest, Message, ToolCall, ToolSpec};
use crate::tools::CallContext;
use crate::vault::mask::NO_SECRETS;

use super::{AgentDefinition, AgentError, Agents, Observer, Recorder};

/// A reply's length when the agent's file does not cap it.
const DEFAULT_MAX_TOKENS: u32 = 1024;
/// A call that could not write even this many tokens within the budget is not made.
const MIN_REPLY_TOKENS: u32 = 16;
/// Per message, on top of its bytes, for the chat template's own tokens.
const MESSAGE_OVERHEAD_TOKENS: u64 = 8;
/// A tool's output is handed to the model up to this many bytes.
const TOOL_OUTPUT_BYTES: usize = 16 * 1024;

impl Agents {
    /// Carry the solve on until it ends, from wherever its stream stands.
    pub(super) async fn drive(
        &self,
        recorder: &mut Recorder<'_>,
        agent: &AgentDefinition,
        observer: &mut (dyn Observer + Send),
    ) -> Result<(), AgentError> {
        loop {
            match recorder.state().next() {
                Next::Done => return Ok(()),
                Next::Finish => {
                    let at = self.now();
                    recorder
                        .record(SolveCommand::Finish { at }, observer)
                        .await?;
                }
                Next::GiveUp { reason } => {
                    self.fail(recorder, ErrorClass::Validation, reason, observer)
                        .await?;
                }
                Next::CallModel { iteration, phase } => {
                    self.call_model(recorder, agent, iteration, phase, observer)
                        .await?;
                }
                Next::RunTools { iteration, calls } => {
                    self.run_tools(recorder, iteration, calls, observer).await?;
                }
            }
        }
    }

    async fn fail(
        &self,
        recorder: &mut Recorder<'_>,
        class: ErrorClass,
        reason: String,
        observer: &mut (dyn Observer + Send),
    ) -> Result<(), AgentError> {
        let at = self.now();
        recorder
            .record(SolveCommand::Fail { class, reason, at }, observer)
            .await
    }

    async fn call_model(
        &self,
        recorder: &mut Recorder<'_>,
        agent: &AgentDefinition,
        iteration: u32,
        phase: Phase,
        observer: &mut (dyn Observer + Send),
    ) -> Result<(), AgentError> {
        let solve = recorder.state().clone();
        let mut request = self.request(agent, &solve, phase);
        if let Err(reason) = fit_budget(agent, &solve, &mut request) {
            return self
                .fail(recorder, ErrorClass::Budget, reason, observer)
                .await;
        }
        let endpoint = agent.endpoint();
        let completion = if agent.file.model.stream {
            let mut on_delta = |text: &str| observer.token(text);
            self.inner
                .client
                .chat_stream(&endpoint, &request, &mut on_delta)
                .await
        } else {
            self.inner.client.chat(&endpoint, &request).await
        };
        let completion = match completion {
            Ok(c) => c,
            Err(e) => {
                let reason = format!("model `{}`: {e}", request.model);
                return self.fail(recorder, e.class(), reason, observer).await;
            }
        };
        observer.model_called(completion.latency);
        let reply = completion.reply;
        let (tokens_in, tokens_out) = counted(&solve, &request, &reply);
        let cost_usd = agent
            .price
            .map_or(0.0, |p| p.cost_of(tokens_in, tokens_out));
        let model_reply = ModelReply {
            iteration,
            phase,
            model: reply.model.clone(),
            content: reply.content.clone(),
            tool_calls: reply
                .tool_calls
                .iter()
                .map(|c| PlannedCall {
                    id: c.id.clone(),
                    tool: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tokens_in,
            tokens_out,
            cost_usd,
            latency_ms: millis(completion.latency),
            attempts: completion.attempts,
        };
        let at = self.now();
        recorder
            .record(
                SolveCommand::RecordReply {
                    reply: model_reply,
                    at,
                },
                observer,
            )
            .await
    }

    /// The request of the next model call: the conversation so far, and the tools
    /// (withheld in the solve phase).
    fn request(&self, agent: &AgentDefinition, solve: &Solve, phase: Phase) -> ChatRequest {
        let setup = solve.setup.as_ref();
        let tools: Vec<ToolSpec> = setup
            .map(|s| s.tools.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|name| self.inner.registry.get(name))
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.input_schema.clone(),
            })
            .collect();
        ChatRequest {
            model: setup.map_or_else(|| agent.file.model.name.clone(), |s| s.model.clone()),
            messages: conversation(solve),
            tool_choice_none: phase == Phase::Solve && !tools.is_empty(),
            tools,
            max_tokens: Some(agent.file.model.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
            temperature: agent.file.model.temperature,
        }
    }

    async fn run_tools(
        &self,
        recorder: &mut Recorder<'_>,
        iteration: u32,
        calls: Vec<PlannedCall>,
        observer: &mut (dyn Observer + Send),
    ) -> Result<(), AgentError> {
        let solve = recorder.state();
        let allowed = solve
            .setup
            .as_ref()
            .map(|s| s.tools.clone())
            .unwrap_or_default();
        let cost: f64 = calls
            .iter()
            .filter_map(|c| self.inner.registry.get(&c.tool))
            .map(|t| t.cost_usd)
            .sum();
        if let Some(left) = solve.remaining_usd()
            && cost > left
        {
            let reason = format!(
                "the tool calls of iteration {iteration} cost {cost:.6} USD, more than the {left:.6} USD left of the budget"
            );
            return self
                .fail(recorder, ErrorClass::Budget, reason, observer)
                .await;
        }
        let solve_id = recorder.id();
        let mut running = JoinSet::new();
        for call in calls {
            let registry = self.inner.registry.clone();
            let allowed = allowed.clone();
            running.spawn(async move {
                let started = std::time::Instant::now();
                let outcome = call_tool(&registry, &allowed, solve_id, &call).await;
                let cost_usd = match &outcome {
                    ToolOutcome::Output(_) => registry.get(&call.tool).map_or(0.0, |t| t.cost_usd),
                    ToolOutcome::Error(_) => 0.0,
                };
                ToolResult {
                    iteration,
                    call_id: call.id,
                    tool: call.tool,
                    outcome,
                    duration_ms: millis(started.elapsed()),
                    cost_usd,
                }
            });
        }
        while let Some(joined) = running.join_next().await {
            let result =
                joined.map_err(|e| AgentError::Internal(format!("a tool call panicked: {e}")))?;
            let at = self.now();
            recorder
                .record(SolveCommand::RecordTool { result, at }, observer)
                .await?;
        }
        Ok(())
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        (self.inner.clock)()
    }
}

/// One call: an allowed tool, arguments that are a JSON object, then the registry.
async fn call_tool(
    registry: &crate::tools::Registry,
    allowed: &[String],
    solve_id: crate::domain::ids::SolveId,
    call: &PlannedCall,
) -> ToolOutcome {
    let error = |class: ErrorClass, message: String| {
        ToolOutcome::Error(crate::domain::run::StepError { class, message })
    };
    if !allowed.iter().any(|t| t == &call.tool) {
        return error(
            ErrorClass::Validation,
            format!(
                "`{}` is not one of this agent's tools ({})",
                call.tool,
                allowed.join(", ")
            ),
        );
    }
    let arguments: Value = if call.arguments.trim().is_empty() {
        json!({})
    } else {
        match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => {
                return error(
                    ErrorClass::Validation,
                    format!("the arguments of `{}` are not valid JSON: {e}", call.tool),
                );
            }
        }
    };
    let key = format!("{solve_id}:{}", call.id);
    let ctx = CallContext {
        run_id: crate::domain::ids::RunId::from_uuid(solve_id.as_uuid()),
        call_key: &key,
        mask: &NO_SECRETS,
    };
    match registry.call(&call.tool, &arguments, ctx).await {
        Ok(success) => ToolOutcome::Output(success.output),
        Err(failure) => error(failure.class, failure.message),
    }
}

/// The conversation as the model sees it, rebuilt from the stream.
pub(super) fn conversation(solve: &Solve) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(system) = solve.setup.as_ref().and_then(|s| s.system_prompt.clone()) {
        messages.push(Message::System { content: system });
    }
    messages.push(Message::User {
        content: solve.prompt.clone(),
    });
    for turn in &solve.turns {
        messages.push(Message::Assistant {
            content: turn.reply.content.clone(),
            tool_calls: turn
                .reply
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.tool.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
        });
        for call in &turn.reply.tool_calls {
            if let Some(result) = turn.results.iter().find(|r| r.call_id == call.id) {
                messages.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    content: tool_content(&result.outcome),
                });
            }
        }
    }
    messages
}

fn tool_content(outcome: &ToolOutcome) -> String {
    let text = match outcome {
        ToolOutcome::Output(v) => v.to_string(),
        ToolOutcome::Error(e) => {
            json!({"error": {"class": e.class, "message": e.message}}).to_string()
        }
    };
    crate::text::clip(&text, TOOL_OUTPUT_BYTES)
}

/// Check the budget covers the most the call could cost, lowering `max_tokens` to
/// fit what is left; an error says why the call is not made.
pub(super) fn fit_budget(
    agent: &AgentDefinition,
    solve: &Solve,
    request: &mut ChatRequest,
) -> Result<(), String> {
    let (Some(left), Some(price)) = (solve.remaining_usd(), agent.price) else {
        return Ok(());
    };
    let prompt = prompt_tokens_bound(solve, request);
    let prompt_cost = price.cost_of(prompt, 0);
    let per_token = price.cost_of(0, 1);
    let wanted = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let affordable = if per_token > 0.0 {
        ((left - prompt_cost) / per_token).floor()
    } else {
        f64::from(wanted)
    };
    if affordable < f64::from(MIN_REPLY_TOKENS) {
        return Err(format!(
            "the next model call could cost {:.6} USD (a prompt of up to {prompt} tokens and a reply of {MIN_REPLY_TOKENS}), more than the {left:.6} USD left of the budget",
            prompt_cost + per_token * f64::from(MIN_REPLY_TOKENS)
        ));
    }
    // `affordable` is at least MIN_REPLY_TOKENS here; above u32::MAX it is simply
    // not the limit.
    let affordable = if affordable >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        affordable as u32
    };
    request.max_tokens = Some(wanted.min(affordable));
    Ok(())
}

/// The most tokens the prompt can be: the last call's prompt and reply (as the server
/// counted them) and the bytes added since; for the first call, every byte of the
/// messages and the tools (no tokenizer gives fewer tokens than bytes... only more
/// bytes per token), with each message's template overhead.
fn prompt_tokens_bound(solve: &Solve, request: &ChatRequest) -> u64 {
    let overhead = request.messages.len() as u64 * MESSAGE_OVERHEAD_TOKENS;
    match solve.turns.last() {
        Some(last) => {
            let added: u64 = last
                .results
                .iter()
                .map(|r| tool_content(&r.outcome).len() as u64 + MESSAGE_OVERHEAD_TOKENS)
                .sum();
            last.reply.tokens_in + last.reply.tokens_out + added + overhead
        }
        None => {
            let messages = serde_json::to_string(&request.messages).map_or(0, |s| s.len());
            let tools = serde_json::to_string(&request.tools).map_or(0, |s| s.len());
            (messages + tools) as u64 + overhead
        }
    }
}

/// The tokens of a call as the server counted them; when it did not (llama.cpp's
/// Python server sends no usage in streams), counted from bytes: an upper bound, so
/// what was spent is never under-counted and a budget still holds.
fn counted(solve: &Solve, request: &ChatRequest, reply: &crate::models::ChatReply) -> (u64, u64) {
    if reply.usage.prompt_tokens > 0 || reply.usage.completion_tokens > 0 {
        return (reply.usage.prompt_tokens, reply.usage.completion_tokens);
    }
    let written = reply.content.as_deref().map_or(0, str::len)
        + reply
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    (prompt_tokens_bound(solve, request), written as u64)
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
