//! Schedules on both stores: two schedulers over one log on an injected clock fire
//! each time once (and start each run once), missed times skipped or caught up,
//! overlapping times skipped or queued behind the run still going, a cron pattern
//! across a daylight-saving change, a fire whose server died before starting its run
//! started by another; and two real servers on the system clock with the CLI.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::Value;

use awl::clock::ManualClock;
use awl::log::StreamType;
use awl::schedules::{Scheduler, Schedules};

use crate::support::cli::Awl;
use crate::support::server::{config, serve_with};
use crate::support::{Backend, TestStore, on_both_stores, poll};

on_both_stores!(worker_threads = 2;
    two_schedulers_fire_each_time_once_on_an_injected_clock,
    overlapping_times_are_skipped_or_queued_behind_the_run_still_going,
    a_fire_whose_run_never_started_is_started_by_another_scheduler,
    two_servers_fire_a_schedule_once_per_second_and_the_cli_shows_it,
    schedules_are_declared_and_operated_over_http_by_role,
    a_new_scheduler_syncs_the_workflows_changed_since_the_last_sync,
);

const LIMIT: u64 = 60;

const REPORT: &str = r#"
name: report
version: "1.0.0"
inputs:
  region: { type: string, required: true }
steps:
  - { id: work, tool: noop }
schedules:
  - name: minutely
    every: 1m
    inputs: { region: eu }
    overlap: allow
  - name: berlin
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    inputs: { region: de }
    overlap: allow
    grace_seconds: 7200
"#;

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

async fn register(t: &TestStore, yaml: &str, name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join(format!("{name}.awl.yaml"));
    std::fs::write(&file, yaml).expect("write");
    awl::definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .expect("register");
    dir
}

/// Every `schedule.fired` in the log: (schedule, due time or none, run id).
async fn fires(t: &TestStore) -> Vec<(String, Option<String>, String)> {
    crate::support::logged(&t.store, "schedule.fired")
        .await
        .into_iter()
        .map(|e| {
            (
                e.stream.id.clone(),
                e.payload["due_at"].as_str().map(str::to_string),
                e.payload["run_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The runs started in the log, by who started them (`schedule:NAME`), with inputs.
async fn runs_started(t: &TestStore) -> Vec<(String, String, Value)> {
    crate::support::logged(&t.store, "run.started")
        .await
        .into_iter()
        .map(|e| {
            (
                e.stream.id.clone(),
                e.metadata.actor.clone().unwrap_or_default(),
                e.payload["inputs"].clone(),
            )
        })
        .collect()
}

/// Both schedulers take a round at the same time.
async fn both(a: &mut Scheduler, b: &mut Scheduler) {
    let (x, y) = tokio::join!(a.step(), b.step());
    x.expect("a round");
    y.expect("a round");
}

async fn two_schedulers_fire_each_time_once_on_an_injected_clock(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _dir = register(&t, REPORT, "report").await;
    let clock = ManualClock::new(at(2026, 3, 28, 12, 0));
    let mut a = Scheduler::new(Schedules::new(t.store.clone(), clock.clock()));
    let mut b = Scheduler::new(Schedules::new(t.store.clone(), clock.clock()));
    // The first round declares the file's schedules (both try; once is recorded).
    both(&mut a, &mut b).await;
    let service = Schedules::new(t.store.clone(), clock.clock());
    let declared: Vec<String> = service
        .list()
        .await
        .expect("list")
        .iter()
        .map(|s| s.name().to_string())
        .collect();
    assert_eq!(declared, ["berlin", "minutely"]);

    // Thirty minutes, a round each minute on both: thirty fires, thirty runs.
    for _ in 0..30 {
        clock.advance(Duration::minutes(1) + Duration::milliseconds(5));
        both(&mut a, &mut b).await;
    }
    let fired = fires(&t).await;
    assert_eq!(fired.len(), 30, "{fired:?}");
    let times: BTreeSet<_> = fired.iter().map(|f| f.1.clone()).collect();
    assert_eq!(times.len(), 30, "each time once");
    let started = runs_started(&t).await;
    assert_eq!(started.len(), 30);
    let fired_runs: BTreeSet<_> = fired.iter().map(|f| f.2.clone()).collect();
    let started_runs: BTreeSet<_> = started.iter().map(|s| s.0.clone()).collect();
    assert_eq!(fired_runs, started_runs, "each fire started its run");
    assert!(
        started
            .iter()
            .all(|(_, by, inputs)| by == "schedule:minutely" && inputs["region"] == "eu"),
        "{started:?}"
    );

    // No server for ten minutes: the nine times over a minute late are skipped (one
    // event), the one on time fires.
    clock.advance(Duration::minutes(10));
    both(&mut a, &mut b).await;
    let minutely = service.get("minutely").await.expect("minutely");
    assert_eq!((minutely.fired(), minutely.skipped()), (31, 9));

    // Across the spring-forward night in Berlin, stepping an hour at a time: 02:30
    // does not exist on 2026-03-29 and fires once, at 03:00 CEST; the next day at
    // 02:30 CEST.
    service
        .pause("minutely", "test", "quiet")
        .await
        .expect("pause");
    for _ in 0..40 {
        clock.advance(Duration::hours(1));
        both(&mut a, &mut b).await;
    }
    let berlin: Vec<Option<String>> = fires(&t)
        .await
        .into_iter()
        .filter(|f| f.0 == "berlin")
        .map(|f| f.1)
        .collect();
    assert_eq!(
        berlin,
        [
            Some("2026-03-29T01:00:00Z".to_string()),
            Some("2026-03-30T00:30:00Z".to_string())
        ]
    );
    // Paused, `minutely` fired nothing in those forty hours.
    let minutely = service.get("minutely").await.expect("minutely");
    assert_eq!(minutely.fired(), 31);
}

const NIGHTLY: &str = r#"
name: nightly
version: "1.0.0"
steps:
  - { id: work, tool: noop }
"#;

async fn overlapping_times_are_skipped_or_queued_behind_the_run_still_going(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _dir = register(&t, NIGHTLY, "nightly").await;
    let clock = ManualClock::new(at(2026, 1, 1, 9, 0));
    let service = Schedules::new(t.store.clone(), clock.clock());
    let runs = awl::runs::Runs::new(t.store.clone(), clock.clock());
    let mut skip = awl::workflow::schedule::ScheduleSpec::every("1m");
    skip.overlap = awl::workflow::schedule::OverlapPolicy::Skip;
    let mut queue = skip.clone();
    queue.overlap = awl::workflow::schedule::OverlapPolicy::Queue;
    service
        .declare("skipper", "nightly", skip, "ops")
        .await
        .expect("declare");
    service
        .declare("queuer", "nightly", queue, "ops")
        .await
        .expect("declare");
    // Bad declarations say what is wrong.
    let bad = service
        .declare(
            "x",
            "nightly",
            awl::workflow::schedule::ScheduleSpec::cron("0 25 * * *"),
            "ops",
        )
        .await
        .expect_err("an hour 25");
    assert!(bad.to_string().contains("cron"), "{bad}");
    let unknown = service
        .declare(
            "y",
            "nope",
            awl::workflow::schedule::ScheduleSpec::every("1m"),
            "ops",
        )
        .await
        .expect_err("no such workflow");
    assert!(unknown.to_string().contains("nope"), "{unknown}");

    // No worker runs them: each schedule's first run stays RUNNING.
    let mut scheduler = Scheduler::new(service.clone());
    scheduler.step().await.expect("round");
    for minute in 1..=3 {
        clock.set(at(2026, 1, 1, 9, minute) + Duration::milliseconds(10));
        scheduler.step().await.expect("round");
    }
    let skipper = service.get("skipper").await.expect("skipper");
    assert_eq!((skipper.fired(), skipper.skipped()), (1, 2), "{skipper:?}");
    let queuer = service.get("queuer").await.expect("queuer");
    assert_eq!(queuer.fired(), 1);
    assert_eq!(queuer.queued().len(), 2, "{queuer:?}");
    // The queued schedule's run ends: the oldest queued time fires at the next round.
    let first = queuer.last_run().expect("a run");
    runs.cancel(first, "ops", "done with it")
        .await
        .expect("cancel");
    clock.advance(Duration::seconds(1));
    scheduler.step().await.expect("round");
    let queuer = service.get("queuer").await.expect("queuer");
    assert_eq!(queuer.fired(), 2);
    assert_eq!(queuer.queued(), [at(2026, 1, 1, 9, 3)]);
    let fired: Vec<_> = fires(&t)
        .await
        .into_iter()
        .filter(|f| f.0 == "queuer")
        .map(|f| f.1.unwrap_or_default())
        .collect();
    assert_eq!(fired, ["2026-01-01T09:01:00Z", "2026-01-01T09:02:00Z"]);
    // The skipping schedule's run ends: the next time fires.
    runs.cancel(skipper.last_run().expect("a run"), "ops", "done")
        .await
        .expect("cancel");
    clock.set(at(2026, 1, 1, 9, 4) + Duration::milliseconds(10));
    scheduler.step().await.expect("round");
    assert_eq!(service.get("skipper").await.expect("skipper").fired(), 2);

    // Paused, a time does not fire; triggered by hand, a run starts at once.
    service
        .pause("skipper", "ops", "freeze")
        .await
        .expect("pause");
    let again = service
        .pause("skipper", "ops", "freeze")
        .await
        .expect_err("twice");
    assert!(again.to_string().contains("paused"), "{again}");
    let triggered = service.trigger("skipper", "ops").await.expect("trigger");
    assert!(triggered.created);
    let by_hand = runs_started(&t)
        .await
        .into_iter()
        .find(|(run, _, _)| *run == triggered.run_id.to_string());
    assert!(by_hand.is_some());
    // Removed, it is gone from the list and its name can be declared again.
    service.remove("skipper", "ops").await.expect("remove");
    let names: Vec<String> = service
        .list()
        .await
        .expect("list")
        .iter()
        .map(|s| s.name().to_string())
        .collect();
    assert_eq!(names, ["queuer"]);
}

async fn a_fire_whose_run_never_started_is_started_by_another_scheduler(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _dir = register(&t, NIGHTLY, "nightly").await;
    let clock = ManualClock::new(at(2026, 1, 1, 9, 0));
    let service = Schedules::new(t.store.clone(), clock.clock());
    service
        .declare(
            "hourly",
            "nightly",
            awl::workflow::schedule::ScheduleSpec::every("1h"),
            "ops",
        )
        .await
        .expect("declare");
    // A server decides the 10:00 fire and appends it, then dies before starting the
    // run.
    clock.set(at(2026, 1, 1, 10, 0));
    fire_and_die(&t, at(2026, 1, 1, 10, 0)).await;
    assert_eq!(fires(&t).await.len(), 1);
    assert!(runs_started(&t).await.is_empty());
    // Another scheduler reads the fire, waits a few seconds for its run, then starts
    // it, under the id the fire recorded, once.
    let mut other = Scheduler::new(service.clone());
    other.step().await.expect("round");
    assert!(
        runs_started(&t).await.is_empty(),
        "not before a few seconds"
    );
    clock.advance(Duration::seconds(6));
    other.step().await.expect("round");
    let started = runs_started(&t).await;
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].0, fires(&t).await[0].2);
    clock.advance(Duration::seconds(6));
    other.step().await.expect("round");
    assert_eq!(runs_started(&t).await.len(), 1, "once");
    // A fire recorded while this scheduler runs (read as the log grows, not at its
    // first look) whose server died too: its run is started the same way.
    clock.set(at(2026, 1, 1, 11, 0));
    fire_and_die(&t, at(2026, 1, 1, 11, 0)).await;
    other.step().await.expect("round");
    assert_eq!(runs_started(&t).await.len(), 1, "not before a few seconds");
    clock.advance(Duration::seconds(6));
    other.step().await.expect("round");
    let started = runs_started(&t).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[1].0, fires(&t).await[1].2);
}

/// A server decides the fire of `now` on the `hourly` schedule and appends it, then
/// dies before starting its run (the decision made here by hand, as its tick would).
async fn fire_and_die(t: &TestStore, now: chrono::DateTime<chrono::Utc>) {
    let stream = awl::log::StreamRef::new(StreamType::Schedule, "hourly");
    awl::store::command::Command::new(&t.store, &stream, awl::log::Metadata::actor("dead"))
        .run(|s: &awl::domain::schedule::Schedule| {
            awl::domain::Decide::decide(
                s,
                awl::domain::schedule::ScheduleCommand::Tick {
                    now,
                    previous_active: false,
                },
            )
        })
        .await
        .expect("the dead server's fire");
}

const EVERY_SECOND: &str = r#"
name: pulse
version: "1.0.0"
steps:
  - { id: beat, tool: noop }
schedules:
  - every: 1s
    overlap: allow
"#;

async fn two_servers_fire_a_schedule_once_per_second_and_the_cli_shows_it(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _dir = register(&t, EVERY_SECOND, "pulse").await;
    let clock = awl::clock::system_clock();
    let one = serve_with(&t.store, config(), clock.clone()).await;
    let two = serve_with(&t.store, config(), clock.clone()).await;
    poll(LIMIT, async || (fires(&t).await.len() >= 4).then_some(()))
        .await
        .expect("the schedule fires every second");
    one.shutdown().await.expect("stop");
    two.shutdown().await.expect("stop");
    // A fire recorded just before the servers stopped may have no run yet: the
    // server that fired it starts the run after recording the fire. A server started
    // again finds such a fire when it reads the log and starts its run
    // (`CONFIRM_AFTER` past the fire), so every fire gets its run.
    let before_restart = fires(&t).await;
    let three = serve_with(&t.store, config(), clock.clone()).await;
    poll(LIMIT, async || {
        let started: BTreeSet<String> = runs_started(&t).await.into_iter().map(|s| s.0).collect();
        before_restart
            .iter()
            .all(|f| started.contains(&f.2))
            .then_some(())
    })
    .await
    .expect("every fire recorded before the stop gets its run, started again if missing");
    three.shutdown().await.expect("stop");
    let fired = fires(&t).await;
    let mut by_time: BTreeMap<Option<String>, usize> = BTreeMap::new();
    for f in &fired {
        *by_time.entry(f.1.clone()).or_default() += 1;
    }
    assert!(
        by_time.values().all(|n| *n == 1),
        "a time fired twice: {by_time:?}"
    );
    // No run was started twice: each has one `run.started` under its fire's id.
    let started = runs_started(&t).await;
    let distinct: BTreeSet<&String> = started.iter().map(|s| &s.0).collect();
    assert_eq!(
        distinct.len(),
        started.len(),
        "a run started twice: {started:?}"
    );
    let awl = Awl::bounded(&t.location, LIMIT);
    let listed = awl.ok(&["schedules", "list"]).await;
    assert!(
        listed.contains("pulse") && listed.contains("every 1s"),
        "{listed}"
    );
    let shown: Value =
        serde_json::from_str(&awl.ok(&["schedules", "show", "pulse"]).await).expect("JSON");
    assert_eq!(shown["source"], "workflow");
    assert!(shown["fired"].as_u64().unwrap_or(0) >= 4, "{shown}");
    // A file's schedule is the file's: removing it by hand is refused.
    let refused = awl.output(&["schedules", "remove", "pulse"]).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("in the file of workflow pulse"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let triggered = awl
        .ok(&["schedules", "trigger", "pulse", "--by", "ops"])
        .await;
    assert!(triggered.contains("started run"), "{triggered}");
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

async fn schedules_are_declared_and_operated_over_http_by_role(backend: Backend) {
    use reqwest::Method;
    let t = TestStore::new(backend).await;
    let _dir = register(&t, REPORT, "report").await;
    let tk = crate::support::server::tokens(&t.store, &[]).await;
    let mut quiet = config();
    quiet.scheduler = false;
    let server = serve_with(&t.store, quiet, awl::clock::system_clock()).await;
    let api = crate::support::server::Api::of(&server);
    let declare = serde_json::json!({
        "name": "weekday-report",
        "workflow": "report",
        "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Paris", "inputs": {"region": "fr"}, "overlap": "queue"}
    });
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::POST,
            "/api/v1/schedules",
            Some(declare.clone()),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/schedules",
            Some(declare),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    assert_eq!(body["status"], "ACTIVE");
    assert_eq!(body["spec"]["timezone"], "Europe/Paris");
    assert!(
        body["next_due"]
            .as_str()
            .is_some_and(|t| t.ends_with("T08:00:00Z") || t.ends_with("T07:00:00Z")),
        "{body}"
    );
    // Bad input says what and where, and records nothing.
    for (wrong, says) in [
        (
            serde_json::json!({"name": "x", "workflow": "report", "schedule": {"cron": "0 9 * *"}}),
            "cron",
        ),
        (
            serde_json::json!({"name": "x", "workflow": "report", "schedule": {"every": "1h"}}),
            "region",
        ),
        (
            serde_json::json!({"name": "x", "workflow": "nope", "schedule": {"every": "1h"}}),
            "nope",
        ),
        (
            serde_json::json!({"name": "x", "workflow": "report", "schedule": {"every": "1h", "when": 3}}),
            "when",
        ),
    ] {
        let (status, body) = api
            .call(
                Some(&tk.operator),
                Method::POST,
                "/api/v1/schedules",
                Some(wrong),
            )
            .await;
        assert!(status.is_client_error(), "{status} {body}");
        assert!(body.to_string().contains(says), "{body}");
    }
    let listed = api.fetch(Some(&tk.viewer), "/api/v1/schedules").await;
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["weekday-report"]);
    let paused = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/schedules/weekday-report/pause",
            serde_json::json!({"reason": "holiday"}),
        )
        .await;
    assert_eq!(paused["status"], "PAUSED");
    assert!(
        paused["paused"]
            .as_str()
            .is_some_and(|p| p.contains("holiday")),
        "{paused}"
    );
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/schedules/weekday-report/pause",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    api.ok(
        &tk.operator,
        Method::POST,
        "/api/v1/schedules/weekday-report/resume",
        serde_json::json!({}),
    )
    .await;
    let (status, started) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/schedules/weekday-report/trigger",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{started}");
    let run = started["run_id"].as_str().expect("a run").to_string();
    let started = runs_started(&t).await;
    let by_hand = started
        .iter()
        .find(|s| s.0 == run)
        .expect("the run started");
    assert_eq!(by_hand.2["region"], "fr", "{by_hand:?}");
    assert_eq!(by_hand.1, "schedule:weekday-report");
    let (status, _) = api
        .call(
            Some(&tk.operator),
            Method::DELETE,
            "/api/v1/schedules/weekday-report",
            None,
        )
        .await;
    assert_eq!(status.as_u16(), 200);
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::GET,
            "/api/v1/schedules/nope",
            None,
        )
        .await;
    assert_eq!(status.as_u16(), 404, "{body}");
    server.shutdown().await.expect("stop");
}

/// The schedulers record how far their syncs of workflow files reached: a new
/// scheduler (a restarted server) syncs the workflows changed since, a file's new
/// schedule included and one it dropped removed, and leaves the rest as they are.
async fn a_new_scheduler_syncs_the_workflows_changed_since_the_last_sync(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _report = register(&t, REPORT, "report").await;
    let clock = ManualClock::new(at(2026, 3, 28, 12, 0));
    let service = Schedules::new(t.store.clone(), clock.clock());
    let names = async || -> Vec<String> {
        service
            .list()
            .await
            .expect("list")
            .iter()
            .map(|s| s.name().to_string())
            .collect()
    };
    let mut first = Scheduler::new(Schedules::new(t.store.clone(), clock.clock()));
    first.step().await.expect("round");
    assert_eq!(names().await, ["berlin", "minutely"]);
    let checkpoint = async || {
        t.store
            .follower_checkpoint("scheduler.workflows")
            .await
            .expect("checkpoint")
            .expect("recorded after the sync")
    };
    let synced = checkpoint().await;
    assert!(synced > 0);
    // Meanwhile (no scheduler running) a second file, and a new version of the first
    // without its Berlin schedule.
    let _pulse = register(&t, EVERY_SECOND, "pulse").await;
    let fewer = REPORT
        .replace("version: \"1.0.0\"", "version: \"1.1.0\"")
        .replace(
            "  - name: berlin\n    cron: \"30 2 * * *\"\n    timezone: Europe/Berlin\n    inputs: { region: de }\n    overlap: allow\n    grace_seconds: 7200\n",
            "",
        );
    assert!(!fewer.contains("berlin"), "{fewer}");
    let _report_2 = register(&t, &fewer, "report").await;
    let mut restarted = Scheduler::new(Schedules::new(t.store.clone(), clock.clock()));
    restarted.step().await.expect("round");
    assert_eq!(names().await, ["minutely", "pulse"]);
    let now_synced = checkpoint().await;
    assert!(now_synced > synced, "{now_synced} > {synced}");
    // Nothing changed since: a new scheduler declares and removes nothing.
    let declarations = async || {
        t.store
            .query_rows(
                "SELECT count(*) AS n FROM events WHERE event_type IN ('schedule.declared', 'schedule.removed')",
                &[],
            )
            .await
            .expect("count")[0]["n"]
            .as_i64()
    };
    let before = declarations().await;
    let mut again = Scheduler::new(Schedules::new(t.store.clone(), clock.clock()));
    again.step().await.expect("round");
    assert_eq!(declarations().await, before);
    assert_eq!(names().await, ["minutely", "pulse"]);
}
