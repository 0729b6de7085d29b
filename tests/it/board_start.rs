//! The board's memory view starts from the board and agents projections' live rows at
//! their checkpoints and folds only the events after them, on both stores: what it
//! then knows is what folding each stream of the log gives; it holds live tasks, not
//! the ended history; listings page through live tasks from memory and ended ones
//! from the projection as one ordered list; and it dispatches. Two boards over one log:
//! a reservation lost to the other board refreshes the loser's view, so its agent
//! takes the next task.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use awl::board::views::TaskView;
use awl::board::{Board, BoardConfig, Caller, NewTask, TaskQuery};
use awl::clock::system_clock;
use awl::domain::ids::{AgentId, TaskId};
use awl::domain::task::{Task, TaskStatus};
use awl::domain::workspace::Capabilities;
use awl::log::{EventFilter, StreamRef, StreamType};
use awl::projections::Projections;
use awl::store::{EventStore, domain_io};
use serde_json::json;

use crate::support::{Backend, TestStore, on_both_stores, sample};

on_both_stores!(worker_threads = 2;
    a_board_started_from_its_projection_knows_what_the_log_says,
    a_reservation_lost_to_another_board_moves_on_to_the_next_task,
);

/// Every task of the log, folded from its stream.
async fn tasks_in_the_log(store: &EventStore) -> BTreeMap<TaskId, TaskView> {
    let filter = EventFilter {
        stream_types: vec![StreamType::Task],
        ..EventFilter::default()
    };
    let (events, _) = store.read_page(0, 100_000, &filter).await.unwrap();
    let ids: BTreeSet<String> = events.into_iter().map(|e| e.stream.id).collect();
    let mut out = BTreeMap::new();
    for id in ids {
        let stream = StreamRef::new(StreamType::Task, id.clone());
        let (task, version) = domain_io::load::<Task>(store, &stream).await.unwrap();
        out.insert(id.parse().unwrap(), TaskView::of(&task, version));
    }
    out
}

/// Every task the board lists, `page` at a time, in order.
async fn listed(board: &Board, statuses: &[TaskStatus], page: usize) -> Vec<TaskView> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let got = board
            .tasks(&TaskQuery {
                statuses: statuses.to_vec(),
                after: after
                    .as_deref()
                    .map(|a| awl::page::Cursor::parse(a).unwrap()),
                limit: page,
                ..TaskQuery::default()
            })
            .await
            .unwrap();
        assert!(got.tasks.len() <= page);
        out.extend(got.tasks);
        match got.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

/// Register `agent`, able to do `capability`.
async fn register(board: &Board, agent: &AgentId, capability: &str) {
    board
        .register(
            agent.clone(),
            Capabilities::new([capability]),
            None,
            &Caller::Agent(agent.clone()),
        )
        .await
        .unwrap();
}

/// Send `n` tasks and take them through: a third completed, then failed, cancelled,
/// in progress, blocked on a question, and the rest left queued.
async fn work(board: &Board, agents: &[AgentId], n: usize, tag: &str) {
    let ops = Caller::User("ops".into());
    for i in 0..n {
        let (task, _) = board
            .send(
                NewTask {
                    prompt: format!("{tag} {i}"),
                    capabilities: Capabilities::new(["rust"]),
                    ..NewTask::default()
                },
                &ops,
                None,
            )
            .await
            .unwrap();
        let id: TaskId = task.task_id.to_string().parse().unwrap();
        let fate = i % 6;
        if fate == 5 {
            continue;
        }
        if fate == 2 {
            board.cancel(id, "not needed".into(), &ops).await.unwrap();
            continue;
        }
        let agent = &agents[i % agents.len()];
        let got = board
            .wait_for_prompt(agent, Some(Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("a task");
        let id: TaskId = got.task_id.to_string().parse().unwrap();
        board.ack(id, agent).await.unwrap();
        let by = Caller::Agent(agent.clone());
        match fate {
            0 => {
                board.complete(id, json!({"i": i}), &by).await.unwrap();
            }
            1 => {
                board.fail(id, "no luck".into(), None, &by).await.unwrap();
            }
            3 => {
                board
                    .progress(id, agent, "going".into(), Some(40))
                    .await
                    .unwrap();
            }
            _ => {
                board.ask(id, agent, "which branch?".into()).await.unwrap();
            }
        }
    }
}

async fn a_board_started_from_its_projection_knows_what_the_log_says(backend: Backend) {
    let t = TestStore::new(backend).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.unwrap();
    let first = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let agents: Vec<AgentId> = (0..3)
        .map(|i| AgentId::try_from(format!("agent-{i}")).unwrap())
        .collect();
    for a in &agents {
        register(&first, a, "rust").await;
    }
    work(&first, &agents, 36, "before").await;
    projections.catch_up_all().await.unwrap();
    // After the checkpoints: more tasks, one more agent, and an in-progress task of
    // before ends.
    work(&first, &agents, 12, "after").await;
    register(&first, &AgentId::try_from("agent-late").unwrap(), "go").await;
    let in_progress = listed(&first, &[TaskStatus::InProgress], 100).await;
    let ending: TaskId = in_progress[0].task_id.to_string().parse().unwrap();
    let holder = AgentId::try_from(in_progress[0].assignee.clone().unwrap()).unwrap();
    first
        .complete(ending, json!({"late": true}), &Caller::Agent(holder))
        .await
        .unwrap();

    let board = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let log = tasks_in_the_log(&t.store).await;
    assert_eq!(log.len(), 48);
    for (id, expected) in &log {
        assert_eq!(&board.task(*id).await.unwrap(), expected, "task {id}");
    }
    // Memory: the live tasks, and only the ended ones it folded past the checkpoint.
    let live = log
        .values()
        .filter(|v| !matches!(v.status.as_str(), "COMPLETED" | "FAILED" | "CANCELLED"))
        .count();
    let held = board.in_memory();
    assert_eq!(held.live_tasks, live, "{held:?}");
    assert_eq!(held.ended_tasks, 12 / 2 + 1, "{held:?}");
    assert_eq!(held.agents, 4, "{held:?}");
    // (When each agent last called is this process's own knowledge.)
    let unseen = |board: &Board| {
        let mut agents = board.agents();
        for a in &mut agents {
            a.last_seen = None;
        }
        agents
    };
    assert_eq!(unseen(&board), unseen(&first));

    // Listings: every task once, in order, page by page across memory and the
    // projection (which is behind: the late ends come from memory).
    let mut expected: Vec<TaskView> = log.values().cloned().collect();
    expected.sort_by_key(|v| (v.queued_at, v.task_id.to_string()));
    for page in [1, 5, 1000] {
        assert_eq!(listed(&board, &[], page).await, expected, "pages of {page}");
    }
    let ended = [TaskStatus::Completed, TaskStatus::Cancelled];
    let want: Vec<TaskView> = expected
        .iter()
        .filter(|v| matches!(v.status.as_str(), "COMPLETED" | "CANCELLED"))
        .cloned()
        .collect();
    assert_eq!(listed(&board, &ended, 4).await, want);
    assert_eq!(
        listed(&board, &[TaskStatus::Blocked], 4).await,
        expected
            .iter()
            .filter(|v| v.status == "BLOCKED")
            .cloned()
            .collect::<Vec<_>>()
    );

    // Counts, once the projection has the late ends too.
    projections.catch_up_all().await.unwrap();
    let counts: BTreeMap<String, usize> = board
        .column_counts()
        .await
        .unwrap()
        .into_iter()
        .map(|(s, n)| (s.as_str().to_string(), n))
        .collect();
    for status in TaskStatus::ALL {
        let n = log.values().filter(|v| v.status == status.as_str()).count();
        assert_eq!(counts[status.as_str()], n, "{status:?}");
    }

    // It dispatches: the oldest queued task goes to a waiting capable agent.
    let oldest = expected
        .iter()
        .find(|v| v.status == "QUEUED")
        .expect("a queued task");
    let got = board
        .wait_for_prompt(&agents[0], Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("a task");
    assert_eq!(got.task_id, oldest.task_id);
}

/// Send a task that needs `rust`, with no agent waiting: it stays queued.
async fn queue(board: &Board, prompt: &str) -> String {
    let (task, _) = board
        .send(
            NewTask {
                prompt: prompt.into(),
                capabilities: Capabilities::new(["rust"]),
                ..NewTask::default()
            },
            &Caller::User("ops".into()),
            None,
        )
        .await
        .unwrap();
    task.task_id.to_string()
}

/// Two boards over one log, one of them not following it (as if the log's tail were
/// slow to bring it another server's writes). The other board reserves the oldest
/// task; an agent waiting on the board behind then decides on its stale view, takes
/// that same task, and loses the append. The stream its reservation read refreshes
/// the view, so the agent takes the next task at once, instead of trying the same
/// one again (a conflict and a read each time) until its wait runs out.
async fn a_reservation_lost_to_another_board_moves_on_to_the_next_task(backend: Backend) {
    let t = TestStore::new(backend).await;
    let open = || Board::open(t.store.clone(), system_clock(), BoardConfig::default());
    let behind = open().await.unwrap();
    let (a, b) = (
        AgentId::try_from("agent-a").unwrap(),
        AgentId::try_from("agent-b").unwrap(),
    );
    register(&behind, &a, "rust").await;
    register(&behind, &b, "rust").await;
    let first = queue(&behind, "first").await;
    let second = queue(&behind, "second").await;

    let other = open().await.unwrap();
    let taken = other
        .wait_for_prompt(&b, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the oldest task, on the other board");
    assert_eq!(taken.task_id.to_string(), first);
    let first: TaskId = first.parse().unwrap();
    assert_eq!(
        behind.task(first).await.unwrap().status,
        "QUEUED",
        "the board behind has not seen the reservation yet"
    );

    let conflicts = || {
        let text = awl::telemetry::render();
        sample(&text, "awl_command_conflicts_total", &[("stream", "task")]).unwrap_or(0.0)
    };
    let conflicts_before = conflicts();
    let got = behind
        .wait_for_prompt(&a, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the next task, not the same one tried until the wait ran out");
    assert_eq!(got.task_id.to_string(), second);
    let seen = behind.task(first).await.unwrap();
    assert_eq!(seen.status, "PENDING_ACK", "{seen:?}");
    assert_eq!(seen.assignee.as_deref(), Some("agent-b"), "{seen:?}");
    // Counted for operators (tests of this binary run side by side: at least one more).
    assert!(conflicts() > conflicts_before, "the conflict is counted");
}
