//! Folding streams into domain state kept in a projection's rows: load the rows the
//! batch touches (one query per 500), apply the batch's new events with the domain's
//! own `apply`, and hand back what changed (with the state and row from before the
//! batch, so a projection can count transitions) for the projection to write.

use std::collections::BTreeMap;

use cqrs_es::Aggregate;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{ProjectionError, Writer};

/// One stream's state after the batch, and what was stored before it.
pub struct Folded<A> {
    pub id: String,
    /// The state before this batch (the default for a new stream).
    pub before: A,
    /// The stored row before this batch (every column), if there was one.
    pub row: Option<Map<String, Value>>,
    pub state: A,
    pub version: i64,
}

/// Fold the events of `kind` in `events` into the states kept in `table` (`{table}`
/// name; columns `key`, `state`, `version`). Only streams that changed come back.
pub async fn fold<A>(
    w: &mut Writer<'_>,
    projection: &'static str,
    table: &str,
    key: &str,
    kind: StreamType,
    events: &[RecordedEvent],
) -> Result<Vec<Folded<A>>, ProjectionError>
where
    A: Aggregate + Serialize + DeserializeOwned + Clone,
{
    fold_events(w, projection, table, key, kind, events, None).await
}

/// [`fold`], calling `each(id, before, after, event)` for every event applied.
pub async fn fold_with<A, F>(
    w: &mut Writer<'_>,
    projection: &'static str,
    table: &str,
    key: &str,
    kind: StreamType,
    events: &[RecordedEvent],
    mut each: F,
) -> Result<Vec<Folded<A>>, ProjectionError>
where
    A: Aggregate + Serialize + DeserializeOwned + Clone,
    F: FnMut(&str, &A, &A, &RecordedEvent) + Send,
{
    fold_events(w, projection, table, key, kind, events, Some(&mut each)).await
}

/// A callback that sees each event with the state before and after it.
type EachEvent<'f, A> = &'f mut (dyn FnMut(&str, &A, &A, &RecordedEvent) + Send);

/// [`fold_with`]; without a callback the state is not copied before every event
/// (a run's state is kilobytes, and the runs projection folds every run event).
async fn fold_events<A>(
    w: &mut Writer<'_>,
    projection: &'static str,
    table: &str,
    key: &str,
    kind: StreamType,
    events: &[RecordedEvent],
    mut each: Option<EachEvent<'_, A>>,
) -> Result<Vec<Folded<A>>, ProjectionError>
where
    A: Aggregate + Serialize + DeserializeOwned + Clone,
{
    let mut by_stream: BTreeMap<&str, Vec<&RecordedEvent>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.stream.kind == kind) {
        by_stream.entry(e.stream.id.as_str()).or_default().push(e);
    }
    if by_stream.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = by_stream.keys().copied().collect();
    let mut known: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT * FROM {table} WHERE {key} IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|id| Param::from(*id)).collect();
        for row in w.query(&sql, &params).await? {
            let id = row
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            known.insert(id, row);
        }
    }
    let mut out = Vec::new();
    for (id, stream_events) in by_stream {
        let row = known.remove(id);
        let (mut state, mut version) = match &row {
            Some(row) => {
                let json = row.get("state").and_then(Value::as_str).unwrap_or_default();
                let state: A =
                    serde_json::from_str(json).map_err(|e| ProjectionError::Corrupt {
                        projection,
                        reason: format!("the stored state of {id} cannot be read: {e}"),
                    })?;
                (
                    state,
                    row.get("version").and_then(Value::as_i64).unwrap_or(0),
                )
            }
            None => (A::default(), 0),
        };
        let before_state = state.clone();
        let before = version;
        for e in stream_events {
            if e.version <= version {
                continue;
            }
            if e.version != version + 1 {
                return Err(ProjectionError::Corrupt {
                    projection,
                    reason: format!(
                        "{} skips from version {version} to {}",
                        e.describe(),
                        e.version
                    ),
                });
            }
            let event = domain_io::decode::<A>(e)?;
            match each.as_deref_mut() {
                Some(each) => {
                    let previous = state.clone();
                    state.apply(event);
                    each(id, &previous, &state, e);
                }
                None => state.apply(event),
            }
            version = e.version;
        }
        if version != before {
            out.push(Folded {
                id: id.to_string(),
                before: before_state,
                row,
                state,
                version,
            });
        }
    }
    Ok(out)
}

/// A state as stored in its row.
pub fn state_json<A: Serialize>(
    projection: &'static str,
    state: &A,
) -> Result<String, ProjectionError> {
    serde_json::to_string(state).map_err(|e| ProjectionError::Corrupt {
        projection,
        reason: format!("a state cannot be written: {e}"),
    })
}
