//! Replaying a run: rebuild it from its events alone, timed, and ask the engine what a
//! worker would do next, without doing it. `awl replay` shows this; it is also the
//! quickest check that a run's history still folds after an event type evolved.

use std::time::{Duration, Instant};

use crate::domain::ids::RunId;
use crate::domain::run::Run;
use crate::engine::{self, TickInput};
use crate::store::domain_io;

use super::{Runs, RunsError, run_stream};

/// A run rebuilt from its log.
#[derive(Debug, Clone)]
pub struct Replay {
    pub run: Run,
    /// Events folded (the stream's version).
    pub version: i64,
    /// Reading the stream.
    pub read: Duration,
    /// Folding the events.
    pub fold: Duration,
    /// The events and effects a worker picking the run up now would produce (their
    /// type names).
    pub next: Vec<String>,
}

impl Runs {
    pub async fn replay(&self, run_id: RunId) -> Result<Replay, RunsError> {
        let started = Instant::now();
        let mut events = self.store.read_stream(&run_stream(run_id)).await?;
        let keys = self
            .store
            .reveal_events(&mut events, crate::vault::Reveal::Plain)
            .await?;
        if events.is_empty() {
            return Err(RunsError::RunNotFound(run_id));
        }
        let read = started.elapsed();
        let folding = Instant::now();
        let (run, version) = domain_io::fold::<Run>(&events)?;
        let fold = folding.elapsed();
        let name = run.workflow().map(|w| w.to_string()).unwrap_or_default();
        let definition = self
            .definitions
            .get(&self.store, &name, run.workflow_version())
            .await?;
        let tick = engine::tick(
            &definition,
            &run,
            &TickInput {
                now: self.now(),
                protection: std::sync::Arc::new(engine::protect::protection(
                    &definition,
                    &run,
                    &keys,
                    &crate::vault::Mask::default(),
                )),
                ..TickInput::default()
            },
        )?;
        let next = tick
            .events
            .iter()
            .map(cqrs_es::DomainEvent::event_type)
            .chain(tick.effects.iter().map(|e| e.name().to_string()))
            .collect();
        Ok(Replay {
            run,
            version,
            read,
            fold,
            next,
        })
    }
}
