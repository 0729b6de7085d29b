//! The domain: the four event streams of awl and the rules that govern them.
//!
//! Every aggregate here is pure. A command is checked against the state folded from
//! the stream's events by `decide`, which returns new events or a typed error; `apply`
//! folds an event into the state and never fails. Nothing in this module does I/O or
//! reads a clock: commands carry the time (`at`) they were issued.
//!
//! cqrs-es drives the aggregates through [`cqrs_es::Aggregate`], implemented for each
//! by one macro (`impl_aggregate!`): its `handle` is a thin adapter over `decide` (see
//! [`handle_with`]) and its `apply` is the aggregate's own `apply_event`. The events
//! are a permanent wire format: each variant has an explicit, dotted type name
//! (`task.queued`) that equals its serde tag, and a schema version. Old versions load
//! through the upcasters in [`upcasters`].
//!
//! | stream     | aggregate                          | what one stream holds                     |
//! |------------|------------------------------------|-------------------------------------------|
//! | `workflow` | [`workflow::WorkflowDefinition`]   | one workflow name: its versions, proposals |
//! | `run`      | [`run::Run`]                       | one run: steps, attempts, gates, budget   |
//! | `task`     | [`task::Task`]                     | one unit of agent work on the board       |
//! | `agent`    | [`agent::Agent`]                   | one agent: capabilities, workspace        |
//! | `bulk`     | [`bulk::Bulk`]                     | one action over many runs                 |
//! | `schedule` | [`schedule::Schedule`]             | one schedule: its times and what each did |
//! | `debounce` | [`debounce::Debounce`]             | the starts of one workflow with one key   |
//! | `solve`    | [`solve::Solve`]                   | one question worked by awl's own agent    |

pub mod agent;
pub mod bulk;
pub mod chat;
pub mod debounce;
pub mod ids;
pub mod learning;
pub mod rate;
pub mod run;
pub mod schedule;
pub mod solve;
pub mod task;
#[cfg(test)]
pub(crate) mod testing;
pub mod upcasters;
pub mod workflow;
pub mod workspace;

use cqrs_es::Aggregate;
use cqrs_es::event_sink::EventSink;

/// Pure decision logic shared by every aggregate: no I/O, no clock.
pub trait Decide: Aggregate {
    /// Check `command` against the current state and return the events it causes.
    fn decide(&self, command: Self::Command) -> Result<Vec<Self::Event>, Self::Error>;
}

/// The body of every `Aggregate::handle`: decide, then apply and record each event.
pub async fn handle_with<A: Decide>(
    aggregate: &mut A,
    command: A::Command,
    sink: &EventSink<A>,
) -> Result<(), A::Error> {
    for event in aggregate.decide(command)? {
        sink.write(event, aggregate).await;
    }
    Ok(())
}

/// `impl cqrs_es::Aggregate` for one of the aggregates of this module, the same way for
/// each: `TYPE` is the stream type, `handle` is [`handle_with`] (so cqrs-es goes through
/// `decide`), `apply` is the aggregate's inherent `apply_event`, and there are no
/// services (the domain does no I/O).
///
/// `impl_aggregate!(Task, "task", TaskCommand, TaskEvent, TaskError);`
macro_rules! impl_aggregate {
    ($aggregate:ty, $stream_type:literal, $command:ty, $event:ty, $error:ty) => {
        impl cqrs_es::Aggregate for $aggregate {
            const TYPE: &'static str = $stream_type;
            type Command = $command;
            type Event = $event;
            type Error = $error;
            type Services = ();

            async fn handle(
                &mut self,
                command: Self::Command,
                _services: &Self::Services,
                sink: &cqrs_es::event_sink::EventSink<Self>,
            ) -> Result<(), Self::Error> {
                $crate::domain::handle_with(self, command, sink).await
            }

            fn apply(&mut self, event: Self::Event) {
                self.apply_event(event);
            }
        }
    };
}
pub(crate) use impl_aggregate;
