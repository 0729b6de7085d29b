//! What a failed attempt leads to: the error handler for its class (the step's, then
//! the workflow's), the retry policy, and finally the step's `on_error`.

use crate::domain::run::{ErrorClass, RecoveryAction};
use crate::workflow::model::{
    Backoff, ErrorHandler, HandlerAction, HandlerClass, OnError, RetryPolicy, Step, Workflow,
};

/// The decision about one failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Record `action` and try again after `backoff_ms`.
    Retry {
        action: RecoveryAction,
        backoff_ms: u64,
    },
    /// Open a gate: a person decides whether to try again.
    Escalate { approvers: Vec<String> },
    /// No more attempts: `on_error` decides what the failure means for the run.
    Settle(OnError),
}

/// The timeout used when `increase_timeout` meets a step without one, in seconds.
pub(crate) const DEFAULT_TIMEOUT_FOR_INCREASE: u64 = 60;

/// Decide what follows attempt `failed_attempt` of `step` failing with `class`.
/// `current_timeout` is the timeout that attempt ran with; `jitter_unit` a number in
/// [0, 1) derived from the attempt.
pub(crate) fn decide(
    workflow: &Workflow,
    step: &Step,
    class: ErrorClass,
    failed_attempt: u32,
    current_timeout: Option<u64>,
    jitter_unit: f64,
) -> Decision {
    let on_error = step.common.on_error.unwrap_or_default();
    let policy = retry_policy(step);
    let handler = handler_for(&step.common.error_handlers, class)
        .or_else(|| handler_for(&workflow.error_handlers, class));
    let Some(handler) = handler else {
        return match &policy {
            Some(p) if failed_attempt < p.max_attempts => Decision::Retry {
                action: RecoveryAction::RetryWithBackoff,
                backoff_ms: backoff_ms(p, failed_attempt, jitter_unit),
            },
            _ => Decision::Settle(settled(on_error)),
        };
    };
    if handler.action == HandlerAction::Abort {
        return Decision::Settle(settled(on_error));
    }
    // A person decides each escalation: only an explicit limit stops asking.
    let max_attempts = match handler.action {
        HandlerAction::Escalate => handler.max_attempts.unwrap_or(u32::MAX),
        _ => handler
            .max_attempts
            .or(policy.as_ref().map(|p| p.max_attempts))
            .unwrap_or(3),
    };
    if failed_attempt >= max_attempts {
        return Decision::Settle(settled(on_error));
    }
    let action = match handler.action {
        HandlerAction::Retry => RecoveryAction::Retry,
        HandlerAction::RetryWithBackoff => RecoveryAction::RetryWithBackoff,
        HandlerAction::IncreaseTimeout => {
            let base = current_timeout.unwrap_or(DEFAULT_TIMEOUT_FOR_INCREASE) as f64;
            let factor = handler.timeout_factor.unwrap_or(2.0).max(1.0);
            RecoveryAction::IncreaseTimeout {
                new_timeout_seconds: ((base * factor).ceil() as u64).max(1),
            }
        }
        HandlerAction::RefreshAuth => RecoveryAction::RefreshAuth,
        HandlerAction::Fallback => RecoveryAction::Fallback {
            tool: handler.fallback_tool.clone().unwrap_or_default(),
        },
        HandlerAction::Escalate => {
            return Decision::Escalate {
                approvers: handler.approvers.clone(),
            };
        }
        HandlerAction::Abort => return Decision::Settle(settled(on_error)),
    };
    let backoff = match action {
        RecoveryAction::RetryWithBackoff => {
            let p = policy.unwrap_or_else(default_policy);
            backoff_ms(&p, failed_attempt, jitter_unit)
        }
        _ => 0,
    };
    Decision::Retry {
        action,
        backoff_ms: backoff,
    }
}

/// `retry` exhausted means abort.
fn settled(on_error: OnError) -> OnError {
    match on_error {
        OnError::Retry => OnError::Abort,
        other => other,
    }
}

/// The step's retry policy; `on_error: retry` without one means three attempts with
/// exponential back-off from one second.
pub(crate) fn retry_policy(step: &Step) -> Option<RetryPolicy> {
    match (&step.common.retry, step.common.on_error) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(OnError::Retry)) => Some(default_policy()),
        _ => None,
    }
}

fn default_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        backoff: Backoff::Exponential,
        base_seconds: None,
        max_seconds: None,
        jitter: None,
    }
}

pub(crate) fn handler_for(handlers: &[ErrorHandler], class: ErrorClass) -> Option<&ErrorHandler> {
    let own = handler_class(class);
    handlers
        .iter()
        .find(|h| h.class == own)
        .or_else(|| handlers.iter().find(|h| h.class == HandlerClass::Any))
}

fn handler_class(class: ErrorClass) -> HandlerClass {
    match class {
        ErrorClass::Network => HandlerClass::Network,
        ErrorClass::RateLimit => HandlerClass::RateLimit,
        ErrorClass::Authentication => HandlerClass::Authentication,
        ErrorClass::Dependency => HandlerClass::Dependency,
        ErrorClass::Validation => HandlerClass::Validation,
        ErrorClass::Timeout => HandlerClass::Timeout,
        ErrorClass::Budget => HandlerClass::Budget,
        ErrorClass::Unknown => HandlerClass::Unknown,
    }
}

/// The delay before the attempt after `failed_attempt` (from 1), in milliseconds:
/// `base` seconds times 2^(n-1) (exponential), n (linear) or 1 (constant), at most
/// `max_seconds`, then moved by up to `jitter` of itself either way (`jitter_unit` in
/// [0, 1) picks where), and never past the cap.
pub fn backoff_ms(policy: &RetryPolicy, failed_attempt: u32, jitter_unit: f64) -> u64 {
    let base = policy.base_seconds.unwrap_or(1.0).max(0.0);
    let cap = policy.max_seconds.unwrap_or(300.0).max(0.0);
    let n = failed_attempt.max(1);
    let raw = match policy.backoff {
        Backoff::Exponential => base * 2f64.powi(n.saturating_sub(1).min(62) as i32),
        Backoff::Linear => base * f64::from(n),
        Backoff::Constant => base,
    };
    let capped = raw.min(cap);
    let jitter = policy.jitter.unwrap_or(0.0).clamp(0.0, 1.0);
    let moved = capped * (1.0 + jitter * (2.0 * jitter_unit.clamp(0.0, 1.0) - 1.0));
    (moved.min(cap).max(0.0) * 1000.0).round() as u64
}

#[cfg(test)]
mod tests;
