//! Checking a projection against the log: its tables must equal a fold of the log up
//! to its checkpoint (`awl check`).
//!
//! A fresh generation of the projection's tables is filled from position 0 beside the
//! live one, up to the live checkpoint, with the same code that keeps it live; then,
//! holding the projection's lock (so the live tables and checkpoint stand still), the
//! last events are applied up to the checkpoint as it is then, both generations are
//! read row by row and compared, and the scratch generation is dropped. Nothing the
//! readers see changes. A difference means a projection that missed or doubled an
//! event, a row written by hand, or a handler that is not a function of the log.

use serde::Serialize;

use crate::log::{EventFilter, RecordedEvent};
use crate::store::StoreTx;

use super::runner::{
    BATCH, Projections, create_generation, drop_generation, filter_of, hidden, read_state,
};
use super::{Projection, ProjectionError, Writer};

/// The generation a check fills: far from any the runner will use (it counts up
/// from 1 by rebuilds). One per store, so two checks of one store at the same time
/// would share it: run one at a time (a check drops what an earlier one left).
const SCRATCH_GENERATION: i64 = 999_999_999;

/// How much of a differing row a finding shows.
const EXAMPLE_CHARS: usize = 300;

/// One table of a projection that is not what the log folds to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableDifference {
    pub projection: String,
    pub table: String,
    /// The checkpoint the comparison was made at.
    pub position: i64,
    /// Rows the live table has and the fold has not (counted with repeats).
    pub only_live: usize,
    /// Rows the fold has and the live table has not.
    pub only_folded: usize,
    /// The first differing row of each side, shortened.
    pub example: String,
}

impl Projections {
    /// Compare `name`'s live tables with a fold of the log up to its checkpoint.
    pub async fn verify(&self, name: &str) -> Result<Vec<TableDifference>, ProjectionError> {
        let p = self.find(name)?;
        self.prepare().await?;
        let backend = self.store().backend_name();
        {
            let mut tx = self.begin().await?;
            drop_generation(&mut tx, p.as_ref(), SCRATCH_GENERATION).await?;
            create_generation(&mut tx, p.as_ref(), SCRATCH_GENERATION).await?;
            tx.commit().await?;
        }
        let filter = filter_of(p.as_ref());
        // Most of the way without the lock, one page per transaction.
        let first_target = {
            let mut tx = self.begin().await?;
            let state = read_state(&mut tx, p.name(), false, backend).await?;
            tx.commit().await?;
            state.map_or(0, |s| s.position)
        };
        let mut position = 0;
        while position < first_target {
            let mut tx = self.begin().await?;
            position = self
                .fold_page(&mut tx, p.as_ref(), position, first_target, &filter)
                .await?;
            tx.commit().await?;
        }
        // The rest, and the comparison, under the lock.
        let mut tx = self.begin().await?;
        let state = read_state(&mut tx, p.name(), true, backend)
            .await?
            .ok_or_else(|| {
                ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
            })?;
        while position < state.position {
            position = self
                .fold_page(&mut tx, p.as_ref(), position, state.position, &filter)
                .await?;
        }
        let mut differences = Vec::new();
        for table in p.tables() {
            let live = rows_of(&mut tx, &format!("{table}_g{}", state.generation)).await?;
            let folded = rows_of(&mut tx, &format!("{table}_g{SCRATCH_GENERATION}")).await?;
            if let Some(d) = compare(p.name(), table, state.position, live, folded) {
                differences.push(d);
            }
        }
        drop_generation(&mut tx, p.as_ref(), SCRATCH_GENERATION).await?;
        tx.commit().await?;
        Ok(differences)
    }

    /// Apply one page of the log after `after`, up to `until`, to the scratch tables;
    /// returns the position reached.
    async fn fold_page(
        &self,
        tx: &mut StoreTx,
        p: &dyn Projection,
        after: i64,
        until: i64,
        filter: &EventFilter,
    ) -> Result<i64, ProjectionError> {
        let (mut events, scanned) = self.store().read_page(after, BATCH, filter).await?;
        events.retain(|e: &RecordedEvent| e.position <= until);
        if !events.is_empty() {
            let mut w = Writer {
                tx,
                tables: p.tables(),
                generation: SCRATCH_GENERATION,
            };
            p.apply(&mut w, &hidden(&events)).await?;
        }
        // A page that scanned nothing new means the log ends before `until` (a
        // checkpoint past the head is itself wrong, and shows as missing rows).
        Ok(if scanned <= after {
            until
        } else {
            scanned.min(until)
        })
    }
}

/// Every row of `table`, each as its JSON text, sorted.
async fn rows_of(tx: &mut StoreTx, table: &str) -> Result<Vec<String>, ProjectionError> {
    let rows = tx
        .query_rows(&format!("SELECT * FROM {table}"), &[])
        .await?;
    let mut texts: Vec<String> = rows
        .into_iter()
        .map(|r| serde_json::Value::Object(r).to_string())
        .collect();
    texts.sort_unstable();
    Ok(texts)
}

/// The multiset difference of two sorted row lists.
fn compare(
    projection: &str,
    table: &str,
    position: i64,
    live: Vec<String>,
    folded: Vec<String>,
) -> Option<TableDifference> {
    let (mut only_live, mut only_folded) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < live.len() || j < folded.len() {
        match (live.get(i), folded.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                only_live.push(a);
                i += 1;
            }
            (Some(_), Some(b)) | (None, Some(b)) => {
                only_folded.push(b);
                j += 1;
            }
            (Some(a), None) => {
                only_live.push(a);
                i += 1;
            }
            (None, None) => break,
        }
    }
    if only_live.is_empty() && only_folded.is_empty() {
        return None;
    }
    let short = |row: Option<&&String>| {
        row.map_or_else(
            || "-".to_string(),
            |r| r.chars().take(EXAMPLE_CHARS).collect::<String>(),
        )
    };
    Some(TableDifference {
        projection: projection.to_string(),
        table: table.to_string(),
        position,
        only_live: only_live.len(),
        only_folded: only_folded.len(),
        example: format!(
            "live {} / folded {}",
            short(only_live.first()),
            short(only_folded.first())
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::compare;

    fn rows(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn equal_multisets_are_no_difference_and_repeats_count() {
        assert_eq!(
            compare("p", "t", 9, rows(&["a", "b"]), rows(&["a", "b"])),
            None
        );
        let d = compare("p", "t", 9, rows(&["a", "a", "c"]), rows(&["a", "b"])).unwrap();
        assert_eq!((d.only_live, d.only_folded), (2, 1));
        assert_eq!(d.example, "live a / folded b");
        let d = compare("p", "t", 9, rows(&[]), rows(&["x"])).unwrap();
        assert_eq!((d.only_live, d.only_folded), (0, 1));
        assert_eq!(d.example, "live - / folded x");
    }
}
