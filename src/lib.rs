//! awl: an event-sourced orchestration service for AI-agent workflows.
//!
//! The crate is organised around one append-only log, in layers (each may use only
//! the ones above it; `ARCHITECTURE.md` has the exact table, which a test enforces):
//!
//! - vocabulary, pure: [`log`] (stream types, new and recorded events, metadata,
//!   upcasters), [`clock`] (where services read the time), [`error`] (every error's
//!   kind and stable code), [`page`] (the one cursor format of listings);
//! - [`vault`], pure: masking secrets and sealing personal data (crypto-shredding);
//!   [`text`], pure: messages clipped to a size, errors told with their causes;
//! - the language, pure: [`workflow`] (YAML files, their JSON Schema, every problem
//!   with file, line and column) and [`expr`] (CEL conditions, templates);
//! - the rules, pure: [`domain`] (the workflow, run, task and agent aggregates as
//!   `decide` / `apply`, driven by cqrs-es; no I/O, no clock) and [`engine`] (what a
//!   run does next: `tick`);
//! - storage: [`store`] (the event log on Postgres or embedded SQLite: appends with
//!   optimistic concurrency and group commit, reads, gap-free tails, transactions,
//!   wake-ups, and the one load / decide / append helper, `store::command`);
//!   [`definitions`] (workflow files registered in the log); [`auth`] (tokens and
//!   roles); [`projections`] (read models and every query of them);
//! - services, which every interface calls: [`board`] (agents pull tasks), [`runs`]
//!   (start, read, decide gates, pause, cancel, rerun, replay), [`bulk`] (one action
//!   over many runs, resumable), [`learning`] (workflows proposed from repeated tool
//!   sequences, approved by a person, suggested for a context), [`chat`] (Slack and
//!   Discord: notices posted and edited in place, buttons, forms and slash commands);
//! - carrying runs out: [`executor`] (stateless workers: claim, decide, commit,
//!   perform) and [`runners`] (one attempt of a step: shell, http, database, notify,
//!   built-in tools);
//! - interfaces: [`server`] (`awl serve`: REST, MCP, live streams, the dashboard) and
//!   [`cli`] (the `awl` command);
//! - [`check`]: verifying a store's log (`awl check`).
//!
//! See `ARCHITECTURE.md` at the root of the repository for the code map, who may use
//! whom, the invariants that hold across modules and the main decisions.

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator, for every binary built on this crate
/// (`awl`, the tests and the benchmarks alike). Measured: glibc's malloc and free were
/// 38% of awl's CPU while the projections mined a history (`perf` over `awl
/// projections rebuild learning`), and its arenas kept the peak of a start-up
/// resident for as long as the process ran. See BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod agents;
pub mod auth;
pub mod board;
pub mod bulk;
pub mod chat;
pub mod check;
pub mod cli;
pub mod clock;
pub mod definitions;
pub mod domain;
pub mod engine;
pub mod error;
pub mod executor;
pub mod expr;
pub mod hooks;
pub mod learning;
pub mod log;
pub mod models;
pub mod page;
pub mod projections;
pub mod runners;
pub mod runs;
pub mod schedules;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tools;
pub mod vault;
pub mod workflow;
