//! Given / when / then tables for the run aggregate.
//!
//! `fixtures` names one helper per event and per command and the streams that reach
//! each state; `transitions` spells out the legal moves one by one; `refusals` the
//! refusals that depend on a command's data; `matrix` checks every command against
//! every run status, every step situation and every gate situation, from allowed-sets
//! declared there independently of `decide.rs`; `state` checks what the fold keeps for
//! the executor and the views; `wire` the permanent event format.

mod fixtures;
mod matrix;
mod refusals;
mod state;
mod transitions;
mod wire;
