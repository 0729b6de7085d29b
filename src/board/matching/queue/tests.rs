use std::cell::Cell;
use std::collections::BTreeMap;

use chrono::TimeZone;

use super::*;
use crate::domain::task::Runner;
use crate::domain::workspace::{Capabilities, Workspace};

const GRACE: Duration = Duration::seconds(30);

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// A small deterministic generator (xorshift64*): the same seed, the same queues, so a
/// failure names a case that can be replayed.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, of: &'a [T]) -> &'a T {
        &of[self.below(of.len() as u64) as usize]
    }

    fn capabilities(&mut self) -> Capabilities {
        let names: Vec<&str> = ["rust", "db", "web"]
            .into_iter()
            .filter(|_| self.below(3) == 0)
            .collect();
        Capabilities::new(names)
    }

    fn workspace(&mut self) -> Option<Workspace> {
        let repository = *self.pick(&[None, Some("r1"), Some("r2")]);
        let branch = *self.pick(&[None, Some("main"), Some("dev")]);
        repository.map(|r| Workspace {
            repository: r.into(),
            branch: branch.map(Into::into),
        })
    }

    fn agent_id(&mut self) -> AgentId {
        AgentId::try_from(*self.pick(&["a1", "a2", "a3"])).unwrap()
    }

    fn task(&mut self, ids: u64) -> QueuedTask {
        QueuedTask {
            task_id: TaskId::from_uuid(Uuid::from_u128(1 + self.below(ids) as u128)),
            required: self.capabilities(),
            workspace: self.workspace(),
            agent_hint: (self.below(4) == 0).then(|| self.agent_id()),
            priority: *self.pick(&[-1, 0, 0, 1, 2]),
            // Coarse times, so that ties on priority and age are common.
            queued_at: t0() + Duration::seconds(10 * self.below(6) as i64),
            runner: *self.pick(&[Runner::Any, Runner::Any, Runner::Builtin, Runner::External]),
        }
    }

    fn agent(&mut self) -> AgentProfile {
        AgentProfile {
            agent_id: self.agent_id(),
            capabilities: self.capabilities(),
            workspace: self.workspace(),
            builtin: self.below(3) == 0,
        }
    }
}

/// Check the index against the scan for a few agents, times and skip sets.
fn agrees(g: &mut Gen, queue: &Queue, reference: &BTreeMap<TaskId, QueuedTask>) {
    for _ in 0..6 {
        let agent = g.agent();
        let now = t0() + Duration::seconds(g.below(90) as i64);
        let skipped: Vec<TaskId> = reference
            .keys()
            .filter(|_| g.below(5) == 0)
            .copied()
            .collect();
        let skip = |id: &TaskId| skipped.contains(id);
        let scanned = best_task_for(
            &agent,
            reference.values().filter(|t| !skip(&t.task_id)),
            now,
            GRACE,
        );
        let indexed = queue.best_for(&agent, now, GRACE, skip);
        assert_eq!(
            indexed.map(|t| t.task_id),
            scanned.map(|t| t.task_id),
            "agent {agent:?} at {now} skipping {skipped:?} over {reference:#?}"
        );
        let few = queue.best_few_for(&agent, now, GRACE, skip, 4);
        assert_eq!(few.first().map(|t| t.task_id), indexed.map(|t| t.task_id));
        assert!(few.len() <= 4);
        for t in &few {
            assert!(!skip(&t.task_id) && may_take(t, &agent, now, GRACE));
            assert_eq!(t.priority, few[0].priority, "never a lower priority");
        }
        assert!(
            few.windows(2).all(|w| rank(w[0]) < rank(w[1])),
            "in rank order, each once: {few:#?}"
        );
        if few[..]
            .first()
            .is_some_and(|t| t.agent_hint.as_ref() == Some(&agent.agent_id))
        {
            assert_eq!(few.len(), 1, "a task hinted at the agent comes alone");
        }
    }
}

#[test]
fn the_index_picks_what_the_scan_picks_on_random_queues() {
    for seed in 1..=300u64 {
        let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut queue = Queue::default();
        let mut reference = BTreeMap::new();
        let ids = 1 + g.below(40);
        for _ in 0..60 {
            // Insert (or replace: ids repeat), or remove.
            if g.below(3) == 0 {
                let id = TaskId::from_uuid(Uuid::from_u128(1 + g.below(ids) as u128));
                assert_eq!(
                    queue.remove(&id).map(|t| t.task_id),
                    reference.remove(&id).map(|t: QueuedTask| t.task_id)
                );
            } else {
                let task = g.task(ids);
                reference.insert(task.task_id, task.clone());
                queue.insert(task);
            }
            assert_eq!(queue.len(), reference.len());
            assert!(queue.iter().eq(reference.values()));
            agrees(&mut g, &queue, &reference);
        }
    }
}

#[test]
fn tiers_emptied_by_removals_are_dropped() {
    let mut g = Gen(7);
    let mut queue = Queue::default();
    let tasks: Vec<QueuedTask> = (0..200).map(|_| g.task(1_000)).collect();
    for t in &tasks {
        queue.insert(t.clone());
    }
    for t in &tasks {
        queue.remove(&t.task_id);
    }
    assert!(queue.is_empty());
    assert!(queue.all.is_empty() && queue.anywhere.is_empty());
    assert!(queue.by_repository.is_empty());
    assert!(queue.by_branch.is_empty());
    assert!(queue.by_hint.is_empty());
}

#[test]
fn the_best_task_is_found_without_looking_at_the_whole_queue() {
    let agent = AgentProfile {
        agent_id: AgentId::try_from("a1").unwrap(),
        capabilities: Capabilities::new(["rust"]),
        workspace: Some(Workspace {
            repository: "r1".into(),
            branch: Some("main".into()),
        }),
        builtin: false,
    };
    let mut queue = Queue::default();
    for n in 0..10_000u128 {
        queue.insert(QueuedTask {
            task_id: TaskId::from_uuid(Uuid::from_u128(n + 1)),
            required: Capabilities::new(["rust"]),
            workspace: None,
            agent_hint: None,
            priority: (n % 3) as i32,
            queued_at: t0() + Duration::milliseconds(n as i64),
            runner: Runner::Any,
        });
    }
    let looked = Cell::new(0);
    let best = queue.best_for(&agent, t0(), GRACE, |_| {
        looked.set(looked.get() + 1);
        false
    });
    // The oldest of the highest priority.
    assert_eq!(best.map(|t| t.task_id.as_uuid().as_u128()), Some(3));
    assert_eq!(looked.get(), 1, "tasks looked at");
}

#[test]
fn a_few_as_good_are_the_next_oldest_of_the_best_priority() {
    let agent = AgentProfile {
        agent_id: AgentId::try_from("a1").unwrap(),
        capabilities: Capabilities::new(["rust"]),
        workspace: None,
        builtin: false,
    };
    let mut queue = Queue::default();
    for n in 0..10u128 {
        queue.insert(QueuedTask {
            task_id: TaskId::from_uuid(Uuid::from_u128(n + 1)),
            required: Capabilities::new(["rust"]),
            workspace: None,
            agent_hint: None,
            // Tasks 3 and 7 outrank the rest.
            priority: i32::from(n == 2 || n == 6),
            queued_at: t0() + Duration::milliseconds(n as i64),
            runner: Runner::Any,
        });
    }
    let ids = |few: Vec<&QueuedTask>| -> Vec<u128> {
        few.iter().map(|t| t.task_id.as_uuid().as_u128()).collect()
    };
    assert_eq!(
        ids(queue.best_few_for(&agent, t0(), GRACE, |_| false, 4)),
        [3, 7]
    );
    let taken = |id: &TaskId| [3, 7].contains(&id.as_uuid().as_u128());
    assert_eq!(
        ids(queue.best_few_for(&agent, t0(), GRACE, taken, 4)),
        [1, 2, 4, 5]
    );
    assert_eq!(ids(queue.best_few_for(&agent, t0(), GRACE, taken, 1)), [1]);
}
