//! The audit trail: who did what and when, one row per event of the log.

use async_trait::async_trait;

use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

pub struct Audit;

#[async_trait]
impl Projection for Audit {
    fn name(&self) -> &'static str {
        "audit"
    }
    fn version(&self) -> i32 {
        1
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/audit.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["audit"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        Vec::new()
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let rows = events
            .iter()
            .map(|e| {
                vec![
                    Param::from(e.position),
                    Param::from(micros(e.recorded_at)),
                    Param::from(e.metadata.actor.clone()),
                    Param::from(e.stream.kind.as_str()),
                    Param::from(e.stream.id.clone()),
                    Param::from(e.event_type.clone()),
                ]
            })
            .collect();
        w.upsert(
            "{audit}",
            &[
                "position",
                "at",
                "actor",
                "stream_type",
                "stream_id",
                "event_type",
            ],
            &["position"],
            rows,
        )
        .await
    }
}
