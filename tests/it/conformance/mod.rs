//! The store contract. Every test here is an `async fn(Backend)`, run once on
//! Postgres and once on SQLite by the `suite!` macro below, so both stores are held to
//! exactly the same behaviour.

mod aggregates;
mod appends;
mod cli;
mod concurrency;
mod durability;
mod tailing;

/// Generate `postgres::NAME` and `sqlite::NAME` tokio tests for each listed test.
macro_rules! suite {
    ($($module:ident :: $name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$module::$name(crate::support::Backend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$module::$name(crate::support::Backend::Sqlite).await;
                }
            )*
        }
    };
}

suite!(
    appends::appends_and_reads_back_a_stream,
    appends::wrong_expected_version_is_a_conflict_and_writes_nothing,
    appends::invalid_appends_are_refused_before_the_database,
    appends::transactions_append_many_streams_all_or_nothing,
    appends::pages_and_filters_the_whole_log,
    appends::the_log_is_append_only,
    concurrency::sixteen_tasks_race_on_one_stream,
    tailing::a_tail_sees_every_event_once_in_order_under_concurrent_writers,
    tailing::a_tail_is_woken_by_a_commit_not_by_its_poll,
    durability::reopening_the_store_finds_everything,
    durability::migrations_are_idempotent,
    durability::corrupt_rows_are_errors_that_name_the_event,
    cli::migrate_is_idempotent_from_the_command_line,
    aggregates::commands_become_plain_log_events_and_load_back,
    aggregates::a_refused_command_appends_nothing,
    aggregates::a_stale_aggregate_is_a_conflict,
    aggregates::an_old_agent_registration_loads_through_its_upcaster,
    aggregates::a_payload_of_the_wrong_shape_names_the_event,
    cli::events_prints_the_log_filtered,
    cli::events_refuses_bad_arguments_with_a_reason,
    cli::events_follow_prints_what_is_appended_later,
);
