//! Secrets and personal data in a run: which inputs are sealed when it starts, with
//! which keys, and the [`Protection`] the walker applies to every event it decides.
//!
//! Pure: the keys are handed in (the runs service and the executor fetch or create
//! them beside the log). Sealing is deterministic, so starting the same run twice with
//! the same key (an idempotent retry) writes the same text.

use serde_json::{Map, Value};

use crate::domain::run::{Payload, Run, RunEvent};
use crate::expr::{Scope, Template};
use crate::vault::{KeyId, Keys, Kind, Mask, Personal, Protection, seal};
use crate::workflow::model::Workflow;

/// The subject a run of `definition` with `inputs` carries personal data of, if it
/// declares one (rendered from the inputs).
pub fn subject(
    definition: &Workflow,
    inputs: &Map<String, Value>,
) -> Result<Option<String>, String> {
    let Some(source) = &definition.subject else {
        return Ok(None);
    };
    let scope = Scope {
        inputs: inputs.clone(),
        ..Scope::default()
    };
    let text = Template::parse(source)
        .map_err(|e| format!("subject `{source}`: {e}"))?
        .render_text(&scope)
        .map_err(|e| format!("subject `{source}`: {e}"))?;
    if text.trim().is_empty() {
        return Err(format!("subject `{source}` renders empty for these inputs"));
    }
    Ok(Some(text))
}

fn given<'a>(
    definition: &'a Workflow,
    inputs: &'a Map<String, Value>,
    wanted: impl Fn(&crate::workflow::model::InputSpec) -> bool + 'a,
) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
    definition
        .inputs
        .iter()
        .filter(move |(_, spec)| wanted(spec))
        .filter_map(move |(name, _)| inputs.get(name).map(|v| (name, v)))
        .filter(|(_, v)| !v.is_null())
}

/// The keys a run needs when it starts: its secrets' key (when a secret input is
/// given) and its subject's (when a personal one is).
pub fn start_keys(
    definition: &Workflow,
    run_id: &str,
    inputs: &Map<String, Value>,
) -> Result<Vec<KeyId>, String> {
    let mut ids = Vec::new();
    if given(definition, inputs, |s| s.secret).next().is_some() {
        ids.push(KeyId::for_run_secrets(run_id));
    }
    if given(definition, inputs, |s| s.personal).next().is_some() {
        let subject = subject(definition, inputs)?
            .ok_or_else(|| "personal inputs need the workflow's `subject`".to_string())?;
        ids.push(KeyId::for_subject(&subject));
    }
    Ok(ids)
}

/// Seal the secret and personal inputs in place, with the keys [`start_keys`] named.
pub fn seal_inputs(
    definition: &Workflow,
    run_id: &str,
    inputs: &mut Map<String, Value>,
    keys: &Keys,
) -> Result<(), String> {
    let subject_key = subject(definition, inputs)?.map(|s| KeyId::for_subject(&s));
    let secret_key = KeyId::for_run_secrets(run_id);
    for (name, spec) in &definition.inputs {
        let (kind, id) = match (spec.secret, spec.personal, &subject_key) {
            (true, _, _) => (Kind::Secret, &secret_key),
            (false, true, Some(id)) => (Kind::Personal, id),
            _ => continue,
        };
        let Some(value) = inputs.get_mut(name).filter(|v| !v.is_null()) else {
            continue;
        };
        let key = keys
            .get(id)
            .ok_or_else(|| format!("no key to seal input `{name}` with"))?;
        *value = Value::String(seal(kind, id, key, value));
    }
    Ok(())
}

/// What the walker masks and seals for `run` (its inputs already opened), given the
/// keys at hand and the values the worker masks in every run. `logged_inputs` are the
/// run's inputs as its start event keeps them: an input that arrived sealed as personal
/// data without being declared so (a parent run's personal data handed to a child) is
/// protected under the key it came with, so the child seals what it derives from it
/// as the parent would.
pub fn protection(
    definition: &Workflow,
    run: &Run,
    keys: &Keys,
    always: &Mask,
    logged_inputs: Option<&Value>,
) -> Protection {
    let inputs = match run.inputs() {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut mask = always.clone();
    for (_, value) in given(definition, &inputs, |s| s.secret) {
        mask.extend_from_value(value);
    }
    let own = subject(definition, &inputs)
        .ok()
        .flatten()
        .map(|s| KeyId::for_subject(&s))
        .and_then(|id| keys.get(&id).map(|key| (id, key.clone())))
        .map(|(id, key)| {
            Personal::new(
                id,
                key,
                given(definition, &inputs, |s| s.personal).map(|(_, v)| v),
            )
        });
    let personal = own.or_else(|| inherited(logged_inputs?, &inputs, keys));
    Protection { mask, personal }
}

/// The personal data a run was handed sealed under another run's subject: the key it
/// came under and the opened values. (A run with a subject of its own protects its own;
/// a run given two subjects' data protects the first.)
fn inherited(logged: &Value, opened: &Map<String, Value>, keys: &Keys) -> Option<Personal> {
    let Value::Object(logged) = logged else {
        return None;
    };
    let mut key_id: Option<KeyId> = None;
    let mut values = Vec::new();
    for (name, value) in logged {
        let Some(envelope) = value.as_str().and_then(crate::vault::parse) else {
            continue;
        };
        if envelope.kind != Kind::Personal {
            continue;
        }
        let id = key_id.get_or_insert_with(|| envelope.key_id.clone());
        if *id == envelope.key_id
            && let Some(opened) = opened.get(name)
        {
            values.push(opened.clone());
        }
    }
    let id = key_id?;
    let key = keys.get(&id)?.clone();
    Some(Personal::new(id, key, values.iter()))
}

/// An event as the run's state keeps it (secrets masked) and as the log keeps it
/// (personal data sealed as well).
pub(crate) fn protect(protection: &Protection, mut event: RunEvent) -> (RunEvent, RunEvent) {
    for payload in event.payloads_mut() {
        match payload {
            Payload::Text(text) => protection.mask.apply_to(text),
            Payload::Value(value) => protection.mask.apply_to_value(value),
        }
    }
    let mut logged = event.clone();
    if protection.personal.is_some() {
        for payload in logged.payloads_mut() {
            match payload {
                Payload::Text(text) => protection.seal_text(text),
                Payload::Value(value) => protection.seal_value(value),
            }
        }
    }
    (event, logged)
}
