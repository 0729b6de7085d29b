//! awl: an event-sourced orchestration service for AI-agent workflows.
//!
//! The crate is organised around one append-only log:
//!
//! - [`log`]: the log's vocabulary (stream types, new and recorded events, metadata,
//!   upcasters). No I/O.
//! - [`domain`]: the four aggregates (workflow, run, task, agent) as pure
//!   `decide` / `apply` functions driven by cqrs-es. No I/O, no clock.
//! - [`expr`]: the expression language of workflow files: CEL conditions, templates. Pure.
//! - [`runners`]: one attempt of one step (shell, http, database, notify, built-in
//!   tools): the I/O edge of the executor, with timeouts, caps and circuit breakers.
//! - [`board`]: the agent board service every interface calls.
//! - [`server`] and [`mcp`]: the HTTP API and the MCP endpoint over the board.
//! - [`store`]: the event store over Postgres or embedded SQLite: appends with
//!   optimistic concurrency and group commit, reads, gap-free tails, transactions.
//!
//! See `ARCHITECTURE.md` at the root of the repository for the code map and the
//! invariants that hold across modules.

#![forbid(unsafe_code)]

pub mod auth;
pub mod board;
pub mod cli;
pub mod clock;
pub mod definitions;
pub mod domain;
pub mod engine;
pub mod error;
pub mod executor;
pub mod expr;
pub mod log;
pub mod page;
pub mod projections;
pub mod runners;
pub mod runs;
pub mod server;
pub mod store;
pub mod workflow;
