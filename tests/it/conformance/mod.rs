//! The store contract. Every test here is an `async fn(Backend)`, run once on
//! Postgres and once on SQLite (`on_both_stores!`), so both stores are held to exactly
//! the same behaviour. A check of how Postgres runs the store's SQL, which SQLite has
//! no counterpart of, is a plain test beside the contract it guards.

mod aggregates;
mod appends;
mod archive;
mod cli;
mod concurrency;
mod durability;
mod tailing;

use aggregates::*;
use appends::*;
use archive::*;
use cli::*;
use concurrency::*;
use durability::*;
use tailing::*;

crate::support::on_both_stores!(
    worker_threads = 4;
    appends_and_reads_back_a_stream,
    streams_are_read_from_their_last_continuation,
    wrong_expected_version_is_a_conflict_and_writes_nothing,
    invalid_appends_are_refused_before_the_database,
    transactions_append_many_streams_all_or_nothing,
    many_stream_appends_find_each_version_call_after_call,
    pages_and_filters_the_whole_log,
    the_log_is_append_only,
    sixteen_tasks_race_on_one_stream,
    two_processes_race_on_one_stream,
    a_batch_waiting_behind_another_is_judged_on_what_that_one_wrote,
    batches_race_on_shared_streams,
    rate_tokens_reserved_at_once_are_spaced_by_the_rate,
    a_follower_lease_is_renewed_by_its_keeper_and_given_up,
    a_tail_sees_every_event_once_in_order_under_concurrent_writers,
    a_tail_is_woken_by_a_commit_not_by_its_poll,
    a_tail_is_woken_by_another_process_commit,
    a_follower_reads_its_own_commits_from_memory_as_the_log_holds_them,
    a_follower_reads_another_process_commit_from_the_log,
    reopening_the_store_finds_everything,
    migrations_are_idempotent,
    corrupt_rows_are_errors_that_name_the_event,
    migrate_is_idempotent_from_the_command_line,
    commands_become_plain_log_events_and_load_back,
    a_refused_command_appends_nothing,
    a_stale_aggregate_is_a_conflict,
    an_old_agent_registration_loads_through_its_upcaster,
    a_payload_of_the_wrong_shape_names_the_event,
    events_prints_the_log_filtered,
    events_refuses_bad_arguments_with_a_reason,
    events_follow_prints_what_is_appended_later,
    an_archived_stream_reads_the_same_and_takes_no_append,
    stream_ids_lists_a_kinds_streams_hot_and_archived,
    run_partitions_leave_whole_once_every_run_finished,
    a_log_from_before_the_partitions_reads_the_same_after,
);
