//! Who is calling and what they asked, read the same way by REST and MCP: the agent a
//! call acts for, the caller recorded in the log, idempotency keys, long-poll timeouts
//! and task filters. Both adapters call these, so an agent token cannot act as
//! another agent through either.

use std::time::Duration;

use axum::http::HeaderMap;

use crate::auth::{Principal, Role};
use crate::board::{Caller, TaskQuery};
use crate::domain::ids::{AgentId, GateId, IdError, IdempotencyKey, RunId, TaskId};
use crate::domain::task::TaskStatus;
use crate::learning::Viewer;
use crate::page::Cursor;

use super::error::ApiError;
use super::wire::TaskListParams;

type Api<T> = Result<T, ApiError>;

/// Whose learning a caller sees: an admin every scope's, anyone else its token's
/// (`team:NAME` or `user:NAME`).
pub fn viewer(who: &Principal) -> Viewer {
    if who.role == Role::Admin {
        Viewer::All
    } else {
        Viewer::Scope(who.scope())
    }
}

/// The agent a call acts for: an agent token's own name (a different `agent_id` is
/// refused), or the `agent_id` given by an admin.
pub fn acting_agent(who: &Principal, given: Option<&str>) -> Api<AgentId> {
    if who.role == Role::Agent {
        let own = who.agent_id().ok_or_else(|| {
            ApiError::forbidden(format!("token {:?} is not a valid agent id", who.name))
        })?;
        if let Some(given) = given
            && given != own.as_str()
        {
            return Err(ApiError::forbidden(format!(
                "the token of agent {own} may not act as agent {given}"
            )));
        }
        return Ok(own);
    }
    let given = given
        .ok_or_else(|| ApiError::invalid("agent_id is required (the token is not an agent's)"))?;
    AgentId::try_from(given).map_err(|e| ApiError::invalid(e.to_string()))
}

/// A run id as a caller named it: one that cannot be a run names none (404).
pub fn run_id(raw: &str) -> Api<RunId> {
    raw.parse()
        .map_err(|e: IdError| ApiError::not_found("run_not_found", e.to_string()))
}

/// A gate id as a caller named it.
pub fn gate_id(raw: &str) -> Api<GateId> {
    raw.parse()
        .map_err(|e: IdError| ApiError::not_found("gate_not_found", e.to_string()))
}

/// A task id as a caller named it.
pub fn task_id(raw: &str) -> Api<TaskId> {
    raw.parse()
        .map_err(|e: IdError| ApiError::not_found("task_not_found", e.to_string()))
}

/// Who a person's call is recorded as.
pub fn caller(who: &Principal) -> Caller {
    match who.agent_id() {
        Some(agent) => Caller::Agent(agent),
        None => Caller::User(who.name.clone()),
    }
}

/// An idempotency key as a client gave it (header or argument).
pub fn idempotency_key(given: Option<&str>) -> Api<Option<IdempotencyKey>> {
    given
        .map(|k| IdempotencyKey::try_from(k).map_err(|e| ApiError::invalid(e.to_string())))
        .transpose()
}

/// The `Idempotency-Key` header, if any.
pub fn idempotency_header(headers: &HeaderMap) -> Api<Option<IdempotencyKey>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::invalid("the Idempotency-Key header must be visible ASCII"))?;
    idempotency_key(Some(text))
}

/// A long poll's timeout in seconds, as asked (the board caps it).
pub fn wait_timeout(seconds: Option<f64>) -> Api<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s.min(86_400.0)))),
        Some(s) => Err(ApiError::invalid(format!(
            "timeout_seconds must be a number of seconds >= 0, not {s}"
        ))),
    }
}

/// The board query a listing's filters ask for.
pub fn task_query(p: TaskListParams) -> Api<TaskQuery> {
    let statuses = match &p.status {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| parse_status(s.trim()))
            .collect::<Api<Vec<_>>>()?,
    };
    Ok(TaskQuery {
        statuses,
        assignee: p
            .agent
            .map(AgentId::try_from)
            .transpose()
            .map_err(|e| ApiError::invalid(e.to_string()))?,
        run_id: p
            .run_id
            .map(|r| r.parse::<RunId>())
            .transpose()
            .map_err(|e| ApiError::invalid(e.to_string()))?,
        after: Cursor::parse_opt(p.after.as_deref())?,
        limit: p.limit.unwrap_or(100),
    })
}

pub fn parse_status(s: &str) -> Api<TaskStatus> {
    TaskStatus::ALL
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "unknown status {s:?}: expected one of {}",
                TaskStatus::ALL.map(|t| t.as_str()).join(", ")
            ))
        })
}
