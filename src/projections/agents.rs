//! Agents: one row per registered agent.

use async_trait::async_trait;

use crate::domain::agent::Agent;
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::fold::{fold, state_json};
use super::{Projection, ProjectionError, Writer, micros};

pub struct Agents;

#[async_trait]
impl Projection for Agents {
    fn name(&self) -> &'static str {
        "agents"
    }
    fn version(&self) -> i32 {
        1
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/agents.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["agents"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Agent]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let folded = fold::<Agent>(
            w,
            "agents",
            "{agents}",
            "agent_id",
            StreamType::Agent,
            events,
        )
        .await?;
        let mut rows = Vec::with_capacity(folded.len());
        for f in folded {
            let a = &f.state;
            rows.push(vec![
                Param::from(f.id.clone()),
                Param::from(a.status().map(|s| s.as_str()).unwrap_or("NONE")),
                Param::from(serde_json::to_string(a.capabilities()).unwrap_or_default()),
                Param::from(a.workspace().map(|w| w.repository.clone())),
                Param::from(a.workspace().and_then(|w| w.branch.clone())),
                Param::from(a.registered_at().map(micros)),
                Param::from(a.updated_at().map(micros)),
                Param::from(state_json("agents", a)?),
                Param::from(f.version),
            ]);
        }
        w.upsert(
            "{agents}",
            &[
                "agent_id",
                "status",
                "capabilities",
                "repository",
                "branch",
                "registered_at",
                "updated_at",
                "state",
                "version",
            ],
            &["agent_id"],
            rows,
        )
        .await
    }
}
