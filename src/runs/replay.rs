//! Replaying a run: rebuild it from its events alone, timed, check that the engine
//! still decides every event it once decided (`engine::verify`), and ask it what a
//! worker would do next, without doing it. `awl replay` shows this; it is the check
//! that a run's history still folds, and still leads to the same decisions, after an
//! event type or the engine evolved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::ids::RunId;
use crate::domain::run::Run;
use crate::engine::verify::{Divergence, Recorded, ReplayContext, Verified, verify_history};
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
    /// Whether the engine decides again every event it decided in this history.
    pub verified: Result<Verified, Box<Divergence>>,
    /// The events and effects a worker picking the run up now would produce (their
    /// type names).
    pub next: Vec<String>,
}

impl Runs {
    /// Replay `run_id`, ticking with `env` as the workflow's `env.NAME` (the worker's
    /// allowed environment).
    pub async fn replay(
        &self,
        run_id: RunId,
        env: BTreeMap<String, String>,
        always: &crate::vault::Mask,
    ) -> Result<Replay, RunsError> {
        let started = Instant::now();
        let logged = self.store.read_stream(&run_stream(run_id)).await?;
        let mut events = logged.clone();
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
        let context = ReplayContext {
            env,
            protection: Arc::new(engine::protect::protection(
                &definition,
                &run,
                &keys,
                always,
                logged.first().map(|start| &start.payload["inputs"]),
            )),
        };
        let history = logged
            .iter()
            .zip(&events)
            .map(|(logged, opened)| {
                Ok(Recorded {
                    logged: domain_io::decode::<Run>(logged)?,
                    opened: domain_io::decode::<Run>(opened)?,
                })
            })
            .collect::<Result<Vec<_>, crate::store::StoreError>>()?;
        let verified = verify_history(&definition, &history, &context);
        let tick = engine::tick(
            &definition,
            &run,
            &TickInput {
                now: self.now(),
                env: context.env.clone(),
                protection: context.protection.clone(),
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
            verified,
            next,
        })
    }
}
