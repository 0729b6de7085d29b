//! Solves whose runner died, carried on.
//!
//! A question asked over `POST /api/v1/solve`, MCP `ask_agent` or `awl ask` is worked
//! by the process that took it; if that process dies, the solve stays `running` in the
//! log with no one driving it. (A board task's solve needs none of this: the task
//! comes back to the board and its agent carries the solve on.) Every server looks,
//! every so often, for direct solves whose last event is older than their agent's
//! [`abandoned_after`](crate::agents::AgentDefinition::abandoned_after) (or the
//! configured limit) and drives them on from the log: a recorded model reply is not
//! asked for again, a recorded tool call not run again. Two servers that pick up the
//! same solve at once cannot both record a step: each append is decided on the
//! stream's version, and the loser stops.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::agents::{Agents, Unobserved};
use crate::clock::Clock;
use crate::domain::ids::SolveId;
use crate::projections::queries::{self, SolveFilter};
use crate::store::EventStore;

/// The most solves looked at in one round.
const ROUND: usize = 200;

/// Look every `every` until `stop`; `limit` overrides each agent's own.
pub async fn carry_on_every(
    agents: Agents,
    store: EventStore,
    clock: Clock,
    every: Duration,
    limit: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) {
    let working: Arc<Mutex<HashSet<SolveId>>> = Arc::default();
    loop {
        if let Err(e) = round(&agents, &store, &clock, limit, &working).await {
            tracing::warn!(error = %e, "cannot look for abandoned solves");
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One look: each abandoned solve not already being carried on here gets a task.
async fn round(
    agents: &Agents,
    store: &EventStore,
    clock: &Clock,
    limit: Option<Duration>,
    working: &Arc<Mutex<HashSet<SolveId>>>,
) -> Result<(), queries::QueryError> {
    let now = clock();
    // Nothing younger than the shortest limit can be abandoned.
    let shortest = limit.unwrap_or_else(|| {
        agents
            .list()
            .map(|d| d.abandoned_after(agents.registry()))
            .min()
            .unwrap_or_default()
    });
    let page = queries::solves(
        store,
        &SolveFilter {
            statuses: vec!["running".into()],
            direct: true,
            idle_since: Some(now - chrono::Duration::from_std(shortest).unwrap_or_default()),
            limit: ROUND,
            ..SolveFilter::default()
        },
    )
    .await?;
    for row in page.rows {
        let Ok(id) = row.solve_id.parse::<SolveId>() else {
            continue;
        };
        let Ok(definition) = agents.get(&row.agent) else {
            // An agent this server does not have: a server that has it carries it on.
            continue;
        };
        let after = limit.unwrap_or_else(|| definition.abandoned_after(agents.registry()));
        let idle = row
            .updated_at
            .map(|t| (now - t).to_std().unwrap_or_default())
            .unwrap_or_default();
        if idle < after {
            continue;
        }
        let fresh = working.lock().map(|mut w| w.insert(id)).unwrap_or(false);
        if !fresh {
            continue;
        }
        tracing::info!(solve = %id, agent = %row.agent, idle_s = idle.as_secs(), "carrying on an abandoned solve");
        let (agents, working) = (agents.clone(), working.clone());
        tokio::spawn(async move {
            match agents.resume(id, "awl", &mut Unobserved).await {
                Ok(result) => {
                    tracing::info!(solve = %id, status = result.status, "an abandoned solve ended")
                }
                Err(e) => tracing::warn!(solve = %id, error = %e, "cannot carry on a solve"),
            }
            if let Ok(mut w) = working.lock() {
                w.remove(&id);
            }
        });
    }
    Ok(())
}
