//! cqrs-es over awl's log (`store::repository`): commands run through the framework
//! land as plain log events, load back into the aggregate (through the upcasters),
//! conflict on a stale version, append nothing when refused, and name a corrupt row.

use std::collections::HashMap;

use awl::domain::agent::{Agent, AgentCommand};
use awl::domain::ids::{AgentId, TaskId};
use awl::domain::task::{Task, TaskCommand, TaskError, TaskStatus};
use awl::domain::workspace::{Capabilities, Workspace};
use awl::log::{EventFilter, ExpectedVersion, NewEvent, StreamType};
use awl::store::repository::{LogRepository, framework};
use chrono::{TimeZone, Utc};
use cqrs_es::persist::PersistedEventStore;
use cqrs_es::{AggregateContext, AggregateError, EventStore as _};
use serde_json::json;

use crate::support::{Backend, TestStore, append, stream};

fn at(s: i64) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap() + chrono::Duration::seconds(s)
}

fn queue(task_id: TaskId) -> TaskCommand {
    TaskCommand::Queue {
        task_id,
        prompt: "add a health endpoint".into(),
        required_capabilities: Capabilities::new(["rust"]),
        workspace: Some(Workspace::repository("org/app")),
        agent_hint: None,
        priority: 0,
        review_required: false,
        runner: Default::default(),
        run_step: None,
        at: at(0),
    }
}

fn coder() -> AgentId {
    AgentId::try_from("coder").unwrap()
}

pub async fn commands_become_plain_log_events_and_load_back(backend: Backend) {
    let t = TestStore::new(backend).await;
    let cqrs = framework::<Task>(&t.store, ());
    let id = TaskId::new();
    let key = id.to_string();
    let metadata = HashMap::from([("actor".to_string(), "user:ada".to_string())]);
    cqrs.execute_with_metadata(&key, queue(id), metadata)
        .await
        .expect("queue");
    cqrs.execute(
        &key,
        TaskCommand::Assign {
            agent: coder(),
            at: at(1),
        },
    )
    .await
    .expect("assign");

    // In the log: the event type in its column, the payload without cqrs-es's wrapper.
    let events = t
        .store
        .read_stream(&stream(StreamType::Task, key.clone()))
        .await
        .unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, vec!["task.queued", "task.assigned"]);
    assert_eq!(events[0].payload["prompt"], "add a health endpoint");
    assert_eq!(events[0].metadata.actor.as_deref(), Some("user:ada"));
    assert_eq!(events[1].payload["agent_id"], "coder");
    assert_eq!(events[1].version, 2);

    // Back through cqrs-es: the state folded from the log.
    let es = PersistedEventStore::<LogRepository, Task>::new_event_store(LogRepository::new(
        t.store.clone(),
    ));
    let mut context = es.load_aggregate(&key).await.expect("load");
    let task = context.aggregate();
    assert_eq!(task.status(), Some(TaskStatus::Assigned));
    assert_eq!(task.assignee(), Some(&coder()));
    assert_eq!(task.prompt(), "add a health endpoint");
}

pub async fn a_refused_command_appends_nothing(backend: Backend) {
    let t = TestStore::new(backend).await;
    let cqrs = framework::<Task>(&t.store, ());
    let id = TaskId::new();
    let key = id.to_string();
    cqrs.execute(&key, queue(id)).await.expect("queue");
    let head = t.store.head().await.unwrap();
    // A queued task cannot be acknowledged: nobody was assigned.
    let err = cqrs
        .execute(
            &key,
            TaskCommand::Ack {
                agent: coder(),
                at: at(2),
            },
        )
        .await
        .unwrap_err();
    match err {
        AggregateError::UserError(e) => {
            assert!(matches!(e, TaskError::InvalidTransition { .. }), "{e:?}");
            assert!(e.to_string().contains("is QUEUED: cannot ack"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(t.store.head().await.unwrap(), head, "nothing was appended");
}

pub async fn a_stale_aggregate_is_a_conflict(backend: Backend) {
    let t = TestStore::new(backend).await;
    let cqrs = framework::<Task>(&t.store, ());
    let id = TaskId::new();
    let key = id.to_string();
    cqrs.execute(&key, queue(id)).await.expect("queue");

    let es = PersistedEventStore::<LogRepository, Task>::new_event_store(LogRepository::new(
        t.store.clone(),
    ));
    let stale = es.load_aggregate(&key).await.expect("load");
    // Someone else moves the task on after `stale` was loaded.
    cqrs.execute(
        &key,
        TaskCommand::Assign {
            agent: coder(),
            at: at(1),
        },
    )
    .await
    .expect("assign");
    let decided = vec![awl::domain::task::TaskEvent::Assigned {
        agent_id: AgentId::try_from("other").unwrap(),
        at: at(2),
    }];
    let err = es.commit(decided, stale, HashMap::new()).await.unwrap_err();
    assert!(
        matches!(err, AggregateError::AggregateConflict),
        "expected a conflict, got {err:?}"
    );
    let events = t
        .store
        .read_stream(&stream(StreamType::Task, key))
        .await
        .unwrap();
    assert_eq!(events.len(), 2, "the stale decision wrote nothing");
    assert_eq!(events[1].payload["agent_id"], "coder");
}

pub async fn an_old_agent_registration_loads_through_its_upcaster(backend: Backend) {
    let t = TestStore::new(backend).await;
    // Written by an earlier agent registry, in schema version 1.
    t.store
        .append(append(
            &stream(StreamType::Agent, "veteran"),
            ExpectedVersion::NoStream,
            vec![NewEvent::new(
                "agent.registered",
                1,
                json!({"agent_id": "veteran", "capabilities": "rust, python",
                       "repo": "org/app", "branch": "main",
                       "registered_at": "2024-05-01T10:00:00Z"}),
            )],
        ))
        .await
        .unwrap();
    let cqrs = framework::<Agent>(&t.store, ());
    // The current code decides on the upcast state: moving the workspace is recorded.
    cqrs.execute(
        "veteran",
        AgentCommand::UpdateWorkspace {
            workspace: Some(Workspace::repository("org/other")),
            at: at(5),
        },
    )
    .await
    .expect("update the workspace of an upcast agent");
    let es = PersistedEventStore::<LogRepository, Agent>::new_event_store(LogRepository::new(
        t.store.clone(),
    ));
    let mut context = es.load_aggregate("veteran").await.expect("load");
    let agent = context.aggregate();
    assert!(agent.is_active());
    assert_eq!(agent.capabilities(), &Capabilities::new(["python", "rust"]));
    assert_eq!(agent.workspace(), Some(&Workspace::repository("org/other")));
    let events = t
        .store
        .read_page(0, 10, &EventFilter::default())
        .await
        .unwrap()
        .0;
    assert_eq!(
        events[0].event_version, 2,
        "read back in the current version"
    );
    assert_eq!(events[0].payload["capabilities"], json!(["python", "rust"]));
}

pub async fn a_payload_of_the_wrong_shape_names_the_event(backend: Backend) {
    let t = TestStore::new(backend).await;
    let id = TaskId::new();
    let key = id.to_string();
    t.store
        .append(append(
            &stream(StreamType::Task, key.clone()),
            ExpectedVersion::NoStream,
            vec![NewEvent::new(
                "task.queued",
                1,
                json!({"prompt": 42, "nonsense": true}),
            )],
        ))
        .await
        .unwrap();
    let cqrs = framework::<Task>(&t.store, ());
    let err = cqrs
        .execute(
            &key,
            TaskCommand::Assign {
                agent: coder(),
                at: at(1),
            },
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("task/{key}#1 task.queued (position 1)")),
        "the error names the event: {text}"
    );
    assert!(
        text.contains("does not match the event type"),
        "and says why: {text}"
    );
}
