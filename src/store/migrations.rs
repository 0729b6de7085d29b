//! Schema migrations, one folder per backend under `migrations/`, embedded in the
//! binary so `awl migrate` works from anywhere. Applied at start-up and by
//! `awl migrate`; sqlx records what ran (with checksums) and takes a lock on Postgres,
//! so several processes starting at once apply each migration exactly once.

use std::borrow::Cow;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "event log",
        include_str!("../../migrations/postgres/0001_event_log.sql"),
    ),
    (
        2,
        "append function",
        include_str!("../../migrations/postgres/0002_append_function.sql"),
    ),
    (
        3,
        "run wakeups",
        include_str!("../../migrations/postgres/0003_run_wakeups.sql"),
    ),
    (
        4,
        "run wakeups woken",
        include_str!("../../migrations/postgres/0004_run_wakeups_woken.sql"),
    ),
    (
        5,
        "api tokens",
        include_str!("../../migrations/postgres/0005_api_tokens.sql"),
    ),
    (
        6,
        "agent presence",
        include_str!("../../migrations/postgres/0006_agent_presence.sql"),
    ),
    (
        7,
        "projection state",
        include_str!("../../migrations/postgres/0007_projection_state.sql"),
    ),
    (
        8,
        "run wakeups epoch",
        include_str!("../../migrations/postgres/0008_run_wakeups_epoch.sql"),
    ),
    (
        9,
        "subject keys",
        include_str!("../../migrations/postgres/0009_subject_keys.sql"),
    ),
    (
        10,
        "continued index",
        include_str!("../../migrations/postgres/0010_continued_index.sql"),
    ),
    (
        11,
        "events archive",
        include_str!("../../migrations/postgres/0011_events_archive.sql"),
    ),
    (
        12,
        "flow control",
        include_str!("../../migrations/postgres/0012_flow_control.sql"),
    ),
    (
        13,
        "rate limits",
        include_str!("../../migrations/postgres/0013_rate_limits.sql"),
    ),
    (
        14,
        "token teams",
        include_str!("../../migrations/postgres/0014_token_teams.sql"),
    ),
    (
        15,
        "chat",
        include_str!("../../migrations/postgres/0015_chat.sql"),
    ),
    (
        16,
        "partitioned log",
        include_str!("../../migrations/postgres/0016_partitioned_log.sql"),
    ),
    (
        17,
        "append generic plans",
        include_str!("../../migrations/postgres/0017_append_generic_plans.sql"),
    ),
    (
        18,
        "append parts as constants",
        include_str!("../../migrations/postgres/0018_append_parts_as_constants.sql"),
    ),
];

const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "event log",
        include_str!("../../migrations/sqlite/0001_event_log.sql"),
    ),
    (
        2,
        "head from events",
        include_str!("../../migrations/sqlite/0002_head_from_events.sql"),
    ),
    (
        3,
        "run wakeups",
        include_str!("../../migrations/sqlite/0003_run_wakeups.sql"),
    ),
    (
        4,
        "run wakeups woken",
        include_str!("../../migrations/sqlite/0004_run_wakeups_woken.sql"),
    ),
    (
        5,
        "api tokens",
        include_str!("../../migrations/sqlite/0005_api_tokens.sql"),
    ),
    (
        6,
        "agent presence",
        include_str!("../../migrations/sqlite/0006_agent_presence.sql"),
    ),
    (
        7,
        "projection state",
        include_str!("../../migrations/sqlite/0007_projection_state.sql"),
    ),
    (
        8,
        "run wakeups epoch",
        include_str!("../../migrations/sqlite/0008_run_wakeups_epoch.sql"),
    ),
    (
        9,
        "subject keys",
        include_str!("../../migrations/sqlite/0009_subject_keys.sql"),
    ),
    (
        10,
        "continued index",
        include_str!("../../migrations/sqlite/0010_continued_index.sql"),
    ),
    (
        11,
        "events archive",
        include_str!("../../migrations/sqlite/0011_events_archive.sql"),
    ),
    (
        12,
        "flow control",
        include_str!("../../migrations/sqlite/0012_flow_control.sql"),
    ),
    (
        13,
        "rate limits",
        include_str!("../../migrations/sqlite/0013_rate_limits.sql"),
    ),
    (
        14,
        "token teams",
        include_str!("../../migrations/sqlite/0014_token_teams.sql"),
    ),
    (
        15,
        "chat",
        include_str!("../../migrations/sqlite/0015_chat.sql"),
    ),
];

fn migrator(list: &[(i64, &'static str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        list.iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

pub(crate) fn postgres() -> Migrator {
    migrator(POSTGRES)
}

pub(crate) fn sqlite() -> Migrator {
    migrator(SQLITE)
}

/// The migrations up to `version` only: a store as an older awl left it, for tests of
/// the migrations that follow on a log that already holds events.
pub(crate) fn postgres_up_to(version: i64) -> Migrator {
    let list: Vec<_> = POSTGRES
        .iter()
        .filter(|m| m.0 <= version)
        .copied()
        .collect();
    migrator(&list)
}

pub(crate) fn sqlite_up_to(version: i64) -> Migrator {
    let list: Vec<_> = SQLITE.iter().filter(|m| m.0 <= version).copied().collect();
    migrator(&list)
}
