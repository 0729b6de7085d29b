use super::*;
use chrono::TimeZone;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn task(n: u128, caps: &[&str]) -> QueuedTask {
    QueuedTask {
        task_id: TaskId::from_uuid(uuid::Uuid::from_u128(n)),
        required: Capabilities::new(caps),
        workspace: None,
        agent_hint: None,
        priority: 0,
        runner: Default::default(),
        queued_at: t0() + Duration::seconds(n as i64),
    }
}

fn agent(name: &str, caps: &[&str]) -> AgentProfile {
    AgentProfile {
        agent_id: AgentId::try_from(name).unwrap(),
        capabilities: Capabilities::new(caps),
        workspace: None,
        builtin: false,
    }
}

fn ws(repo: &str, branch: Option<&str>) -> Option<Workspace> {
    Some(Workspace {
        repository: repo.into(),
        branch: branch.map(Into::into),
    })
}

const GRACE: Duration = Duration::seconds(30);

fn pick(a: &AgentProfile, tasks: &[QueuedTask], now: DateTime<Utc>) -> Option<u128> {
    best_task_for(a, tasks, now, GRACE).map(|t| t.task_id.as_uuid().as_u128())
}

#[test]
fn capabilities_must_be_covered() {
    let tasks = [task(1, &["rust", "db"]), task(2, &["python"])];
    assert_eq!(pick(&agent("a", &["rust"]), &tasks, t0()), None);
    assert_eq!(
        pick(&agent("a", &["rust", "db", "x"]), &tasks, t0()),
        Some(1)
    );
    assert_eq!(pick(&agent("a", &["Python "]), &tasks, t0()), Some(2));
    // A task that needs nothing suits anyone.
    assert_eq!(pick(&agent("a", &[]), &[task(3, &[])], t0()), Some(3));
}

#[test]
fn a_task_goes_only_to_the_kind_of_agent_it_allows() {
    use crate::domain::task::Runner;
    let with = |runner: Runner| QueuedTask {
        runner,
        ..task(1, &["text"])
    };
    let external = agent("ext", &["text"]);
    let builtin = AgentProfile {
        builtin: true,
        ..agent("own", &["text"])
    };
    for (runner, ext, own) in [
        (Runner::Any, Some(1), Some(1)),
        (Runner::Builtin, None, Some(1)),
        (Runner::External, Some(1), None),
    ] {
        let tasks = [with(runner)];
        assert_eq!(
            pick(&external, &tasks, t0()),
            ext,
            "{runner:?} for an external agent"
        );
        assert_eq!(
            pick(&builtin, &tasks, t0()),
            own,
            "{runner:?} for a built-in agent"
        );
    }
}

#[test]
fn older_first_then_priority_beats_age() {
    let mut tasks = vec![task(2, &[]), task(1, &[])];
    assert_eq!(pick(&agent("a", &[]), &tasks, t0()), Some(1));
    tasks[0].priority = 5;
    assert_eq!(pick(&agent("a", &[]), &tasks, t0()), Some(2));
}

#[test]
fn same_workspace_beats_priority_and_branch_beats_repository() {
    let mut a = agent("a", &[]);
    a.workspace = ws("org/app", Some("main"));
    let mut other = task(1, &[]);
    other.priority = 9;
    other.workspace = ws("org/other", None);
    let mut repo = task(2, &[]);
    repo.workspace = ws("org/app", Some("dev"));
    let mut branch = task(3, &[]);
    branch.workspace = ws("org/app", Some("main"));
    assert_eq!(
        pick(&a, &[other.clone(), repo.clone(), branch], t0()),
        Some(3)
    );
    assert_eq!(pick(&a, &[other.clone(), repo], t0()), Some(2));
    // Another repository is still taken when nothing better is there.
    assert_eq!(pick(&a, &[other], t0()), Some(1));
}

#[test]
fn a_hinted_task_waits_for_its_agent_until_the_grace_ends() {
    let mut hinted = task(1, &[]);
    hinted.agent_hint = Some(AgentId::try_from("b").unwrap());
    let tasks = [hinted.clone(), task(5, &[])];
    let a = agent("a", &[]);
    let b = agent("b", &[]);
    let queued = hinted.queued_at;
    assert_eq!(pick(&a, &tasks, queued), Some(5));
    assert_eq!(pick(&b, &tasks, queued), Some(1), "the hint comes first");
    assert_eq!(
        pick(
            &a,
            &[hinted.clone()],
            queued + GRACE - Duration::milliseconds(1)
        ),
        None
    );
    assert_eq!(pick(&a, &[hinted], queued + GRACE), Some(1));
}

#[test]
fn a_task_goes_to_the_hinted_then_best_placed_then_longest_waiting_agent() {
    let mut t = task(1, &["rust"]);
    t.workspace = ws("org/app", None);
    let slow = agent("slow", &["go"]);
    let first = agent("first", &["rust"]);
    let mut placed = agent("placed", &["rust"]);
    placed.workspace = ws("org/app", None);
    let mut hinted = agent("hinted", &["rust"]);
    hinted.workspace = ws("org/zzz", None);
    assert_eq!(best_agent_for(&t, &[&slow], t0(), GRACE), None);
    assert_eq!(best_agent_for(&t, &[&slow, &first], t0(), GRACE), Some(1));
    assert_eq!(best_agent_for(&t, &[&first, &placed], t0(), GRACE), Some(1));
    t.agent_hint = Some(hinted.agent_id.clone());
    assert_eq!(
        best_agent_for(&t, &[&first, &placed, &hinted], t.queued_at, GRACE),
        Some(2)
    );
    assert_eq!(
        best_agent_for(&t, &[&first, &placed], t.queued_at, GRACE),
        None
    );
}

#[test]
fn ties_break_on_the_task_id_so_the_choice_is_deterministic() {
    let a = task(7, &[]);
    let mut b = task(3, &[]);
    b.queued_at = a.queued_at;
    assert_eq!(
        pick(&agent("x", &[]), &[a.clone(), b.clone()], t0()),
        Some(3)
    );
    assert_eq!(pick(&agent("x", &[]), &[b, a], t0()), Some(3));
}
