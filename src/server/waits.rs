//! How many long polls (`wait_for_prompt`, over REST or MCP) one token may hold open
//! at once. With auth off there are no tokens (every caller is the local admin,
//! naming the agent it acts for), so the cap is per agent instead.
//!
//! A long poll holds a connection and a waiter on the board for up to the board's
//! longest wait. Without a cap, one leaked or hostile token could open thousands and
//! starve the server of connections and memory; an agent needs one or two. A call
//! over the cap is refused at once with 429 `too_many_waits` (a tool error over MCP),
//! and a slot is given back when its wait ends, however it ends (answered, timed out,
//! the client gone), because the slot is a guard dropped with the call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;

use super::error::ApiError;
use crate::auth::Principal;
use crate::domain::ids::AgentId;

/// The open long polls per token, shared by both adapters.
#[derive(Clone)]
pub struct WaitSlots {
    per_token: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open long poll; gives its slot back when dropped.
pub struct WaitSlot {
    token: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl WaitSlots {
    pub fn new(per_token: usize) -> Self {
        Self {
            per_token,
            open: Arc::default(),
        }
    }

    /// Take a slot for the caller `who` waiting as `agent` (counted per token, or
    /// per agent with auth off), or refuse when it already holds as many as allowed.
    pub fn take(
        &self,
        who: &Principal,
        agent: &AgentId,
        auth_on: bool,
    ) -> Result<WaitSlot, ApiError> {
        let (key, counted) = if auth_on {
            (format!("token:{}", who.name), format!("token {}", who.name))
        } else {
            (format!("agent:{agent}"), format!("agent {agent}"))
        };
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let held = open.entry(key.clone()).or_default();
        if *held >= self.per_token {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waits",
                format!(
                    "{counted} already has {held} wait_for_prompt calls open, the most \
                     allowed at once: wait for one to return first"
                ),
            ));
        }
        *held += 1;
        Ok(WaitSlot {
            token: key,
            open: self.open.clone(),
        })
    }

    /// How many long polls are open now, over every token.
    pub fn open(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.values().sum()
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = open.get_mut(&self.token) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
mod tests;
