//! Folding streams into domain state kept in a projection's rows: load the rows the
//! batch touches (one query per 500), apply the batch's new events with the domain's
//! own `apply`, and hand back what changed for the projection to write.

use std::collections::BTreeMap;

use cqrs_es::Aggregate;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{ProjectionError, Writer};

/// One stream's state after the batch.
pub struct Folded<A> {
    pub id: String,
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
    A: Aggregate + Serialize + DeserializeOwned,
{
    let mut by_stream: BTreeMap<&str, Vec<&RecordedEvent>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.stream.kind == kind) {
        by_stream.entry(e.stream.id.as_str()).or_default().push(e);
    }
    if by_stream.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = by_stream.keys().copied().collect();
    let mut known: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT {key} AS id, state, version FROM {table} WHERE {key} IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|id| Param::from(*id)).collect();
        for row in w.query(&sql, &params).await? {
            let id = row
                .get("id")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            let state = row
                .get("state")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            let version = row.get("version").and_then(|v| v.as_i64()).unwrap_or(0);
            known.insert(id, (state, version));
        }
    }
    let mut out = Vec::new();
    for (id, stream_events) in by_stream {
        let (mut state, mut version) = match known.remove(id) {
            Some((json, version)) => {
                let state: A =
                    serde_json::from_str(&json).map_err(|e| ProjectionError::Corrupt {
                        projection,
                        reason: format!("the stored state of {id} cannot be read: {e}"),
                    })?;
                (state, version)
            }
            None => (A::default(), 0),
        };
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
            state.apply(domain_io::decode::<A>(e)?);
            version = e.version;
        }
        if version != before {
            out.push(Folded {
                id: id.to_string(),
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
