//! Webhooks that start runs: `POST /api/v1/hooks/NAME`, declared in a workflow file
//! (`hooks:`, the latest runnable version's) and signed as the Standard Webhooks
//! specification signs: `webhook-id`, `webhook-timestamp` (Unix seconds) and
//! `webhook-signature` (`v1,` and the base64 of HMAC-SHA256 over
//! `ID.TIMESTAMP.BODY`, several separated by spaces while a secret rotates).
//!
//! A delivery is refused unless one signature matches under the hook's secret
//! (compared in constant time) and its timestamp is within the hook's tolerance of
//! now; the id is the idempotency key of the run it starts, so a delivery sent again
//! (a retry, or a replay of a captured one within the window) answers with the run
//! the first started instead of starting another. The body's JSON is mapped to the
//! run's inputs by the hook's templates.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use ring::hmac;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::definitions::{Definitions, catalog};
use crate::domain::ids::IdempotencyKey;
use crate::error::{Classified, ErrorKind};
use crate::expr::{Scope, render_value};
use crate::runs::{Runs, RunsError, StartRun, Started};
use crate::store::EventStore;
use crate::workflow::flow::HookSpec;

/// Where a hook's secret comes from: the environment of `awl serve` by default.
pub type SecretSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment as a secret source.
pub fn environment() -> SecretSource {
    Arc::new(|name: &str| std::env::var(name).ok())
}

/// One delivery as it arrived.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    pub id: Option<String>,
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    /// Lower-case header names and their values (the templates see them).
    pub headers: Map<String, Value>,
    pub body: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("no workflow declares a hook named {0:?}")]
    NotFound(String),
    #[error("hook {name:?} is declared by more than one workflow ({workflows}): rename one")]
    Ambiguous { name: String, workflows: String },
    #[error("hook {name:?}: its secret is not configured (set {env} for awl serve)")]
    NoSecret { name: String, env: String },
    #[error("the delivery is not signed: header {0} is missing")]
    Unsigned(&'static str),
    #[error("the signature does not match the body under the hook's secret")]
    Forged,
    #[error(
        "the delivery was signed at {signed}, more than {tolerance}s from now: refused as stale or replayed"
    )]
    Stale { signed: String, tolerance: u64 },
    #[error("the body cannot be read: {0}")]
    Body(String),
    #[error(transparent)]
    Runs(#[from] RunsError),
}

impl Classified for HookError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Ambiguous { .. } => ErrorKind::Conflict,
            Self::NoSecret { .. } => ErrorKind::Unavailable,
            Self::Unsigned(_) | Self::Forged | Self::Stale { .. } => ErrorKind::Unauthenticated,
            Self::Body(_) => ErrorKind::Invalid,
            Self::Runs(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "hook_not_found",
            Self::Ambiguous { .. } => "hook_ambiguous",
            Self::NoSecret { .. } => "hook_secret_missing",
            Self::Unsigned(_) => "hook_unsigned",
            Self::Forged => "hook_signature_invalid",
            Self::Stale { .. } => "hook_stale",
            Self::Body(_) => "invalid_request",
            Self::Runs(e) => e.code(),
        }
    }
}

/// The webhooks service.
#[derive(Clone)]
pub struct Hooks {
    store: EventStore,
    runs: Runs,
    definitions: Definitions,
    secrets: SecretSource,
    clock: Clock,
}

impl Hooks {
    pub fn new(store: EventStore, clock: Clock, secrets: SecretSource) -> Self {
        Self {
            runs: Runs::new(store.clone(), clock.clone()),
            store,
            definitions: Definitions::default(),
            secrets,
            clock,
        }
    }

    /// Check `delivery` against hook `name` and start its run (or find the run the
    /// same delivery started before).
    pub async fn deliver(&self, name: &str, delivery: Delivery) -> Result<Started, HookError> {
        let (workflow, hook) = self.find(name).await?;
        let secret = (self.secrets)(&hook.secret_env).ok_or_else(|| HookError::NoSecret {
            name: name.to_string(),
            env: hook.secret_env.clone(),
        })?;
        let id = delivery
            .id
            .as_deref()
            .ok_or(HookError::Unsigned("webhook-id"))?;
        let timestamp = delivery
            .timestamp
            .as_deref()
            .ok_or(HookError::Unsigned("webhook-timestamp"))?;
        let signature = delivery
            .signature
            .as_deref()
            .ok_or(HookError::Unsigned("webhook-signature"))?;
        verify(&secret, id, timestamp, &delivery.body, signature)?;
        fresh(timestamp, (self.clock)(), hook.tolerance_seconds())?;
        let inputs = map_inputs(&hook, &delivery)?;
        let key = IdempotencyKey::try_from(format!("hook:{name}:{id}").as_str())
            .map_err(|e| HookError::Body(format!("webhook-id: {e}")))?;
        let started = self
            .runs
            .start(
                StartRun {
                    workflow,
                    inputs,
                    priority: None,
                    scope: None,
                },
                &format!("hook:{name}"),
                Some(&key),
            )
            .await?;
        Ok(started)
    }

    /// The workflow declaring hook `name` (in its latest runnable version) and the
    /// hook.
    async fn find(&self, name: &str) -> Result<(String, HookSpec), HookError> {
        let entries = catalog::list(&self.store)
            .await
            .map_err(|e| HookError::Runs(e.into()))?;
        let mut found = Vec::new();
        for entry in entries.iter().filter(|e| e.latest.is_some()) {
            let Ok((definition, _)) = self.definitions.resolve(&self.store, &entry.workflow).await
            else {
                continue;
            };
            if let Some(hook) = definition.hooks.iter().find(|h| h.name == name) {
                found.push((entry.workflow.clone(), hook.clone()));
            }
        }
        match found.len() {
            0 => Err(HookError::NotFound(name.to_string())),
            1 => Ok(found.remove(0)),
            _ => Err(HookError::Ambiguous {
                name: name.to_string(),
                workflows: found
                    .iter()
                    .map(|(w, _)| w.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// The key a secret stands for: `whsec_BASE64` decoded, anything else as its bytes.
fn secret_key(secret: &str) -> hmac::Key {
    let bytes = secret
        .strip_prefix("whsec_")
        .and_then(|b64| STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec());
    hmac::Key::new(hmac::HMAC_SHA256, &bytes)
}

/// The `v1` signature of a delivery, as a sender computes it.
pub fn sign(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    let mut content = format!("{id}.{timestamp}.").into_bytes();
    content.extend_from_slice(body);
    let tag = hmac::sign(&secret_key(secret), &content);
    format!("v1,{}", STANDARD.encode(tag.as_ref()))
}

/// One of the space-separated `v1,` signatures matches (in constant time).
pub fn verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    body: &[u8],
    signatures: &str,
) -> Result<(), HookError> {
    let mut content = format!("{id}.{timestamp}.").into_bytes();
    content.extend_from_slice(body);
    let key = secret_key(secret);
    let matches = signatures
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|tag| hmac::verify(&key, &content, &tag).is_ok());
    if matches {
        Ok(())
    } else {
        Err(HookError::Forged)
    }
}

/// The timestamp is within `tolerance` seconds of `now`, either way.
pub fn fresh(timestamp: &str, now: DateTime<Utc>, tolerance: u64) -> Result<(), HookError> {
    let signed: i64 = timestamp.trim().parse().map_err(|_| {
        HookError::Body(format!(
            "webhook-timestamp {timestamp:?} is not Unix seconds"
        ))
    })?;
    let off = (now.timestamp() - signed).unsigned_abs();
    if off > tolerance {
        return Err(HookError::Stale {
            signed: DateTime::<Utc>::from_timestamp(signed, 0)
                .map_or_else(|| timestamp.to_string(), |t| t.to_rfc3339()),
            tolerance,
        });
    }
    Ok(())
}

/// The run's inputs: the hook's templates over `inputs.body` and
/// `inputs.headers`, or the body itself when the hook maps nothing.
fn map_inputs(hook: &HookSpec, delivery: &Delivery) -> Result<Map<String, Value>, HookError> {
    let body: Value = if delivery.body.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(&delivery.body)
            .map_err(|e| HookError::Body(format!("not JSON: {e}")))?
    };
    let Some(mapping) = &hook.inputs else {
        return match body {
            Value::Object(inputs) => Ok(inputs),
            _ => Err(HookError::Body(
                "the hook maps no inputs, so the body must be a JSON object of them".into(),
            )),
        };
    };
    let mut request = Map::new();
    request.insert("body".into(), body);
    request.insert("headers".into(), Value::Object(delivery.headers.clone()));
    let scope = Scope {
        inputs: request,
        ..Scope::default()
    };
    let mapped = render_value(&Value::Object(mapping.clone()), &scope)
        .map_err(|e| HookError::Body(format!("mapping the delivery to inputs: {e}")))?;
    match mapped {
        Value::Object(inputs) => Ok(inputs),
        _ => Err(HookError::Body("the mapping gives no object".into())),
    }
}

#[cfg(test)]
mod tests;
