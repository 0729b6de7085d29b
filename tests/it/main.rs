//! awl's integration tests: one binary, a fresh database (or SQLite file) per test.
//!
//! `conformance` is the store contract, run against Postgres and SQLite alike.
//! `runners` drives the step runners against real processes, a local HTTP server and
//! both databases.
//! `examples` runs every workflow in `workflows/` through the `awl` binary on both
//! stores. `executor` checks the executor's guarantees (crash recovery, leases, inert
//! inputs, back-off, cancellation, no lost wake-ups) with `awl worker` child processes
//! on both stores. `mcp` drives the MCP endpoint with the official MCP Python SDK
//! (`tests/mcp/*.py`, from the virtualenv `scripts/test` provides) and raw HTTP;
//! `mcp_tools` discovers and calls the tools of an MCP server written with that SDK;
//! `registry_tools` runs workflows whose `tool` steps call the tools directory's and
//! that server's tools.
//! `control` pauses, resumes and cancels runs through the binary and the API.
//! `golden` replays the recorded histories in `tests/golden/` through this build.
//! Postgres is found through `AWL_TEST_DATABASE_URL` or `DATABASE_URL` (an admin
//! URL; each test creates and drops its own database), defaulting to
//! `postgres://postgres@127.0.0.1:5432/postgres`. `scripts/test` provides one.

mod agents;
mod architecture;
mod board;
mod board_cli;
mod board_start;
mod chat;
mod chat_standin;
mod conformance;
mod control;
mod dashboard;
mod examples;
mod executor;
mod faults;
mod flow;
mod golden;
mod hooks;
mod learning;
mod mcp;
mod mcp_tools;
mod models;
mod observability;
mod pooler;
mod projections;
mod registry_tools;
mod replica;
mod runners;
mod schedules;
mod secrets;
mod support;
