//! The board from the terminal: the board commands talk to a server (`--server URL`,
//! with `--token`) or, without one, straight to the store through the same [`Board`]
//! service the server uses.

use anyhow::{Context, bail};
use clap::Args;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::board::{Board, BoardConfig, Caller};
use crate::clock::system_clock;
use crate::store::EventStore;

use super::common::actor;

/// Where board commands go.
#[derive(Debug, Args, Clone)]
pub struct Target {
    /// An awl server's URL (`http://127.0.0.1:8080`); without it, the store directly.
    #[arg(long, env = "AWL_SERVER", global = true)]
    server: Option<String>,
    /// The bearer token for `--server`.
    #[arg(long, env = "AWL_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Who is acting (recorded in the log) when talking to the store directly.
    #[arg(long, global = true)]
    by: Option<String>,
}

impl Target {
    pub fn is_remote(&self) -> bool {
        self.server.is_some()
    }
}

/// A board: the store's, or a server's.
pub enum Client {
    Direct {
        board: Board,
        by: Caller,
    },
    Remote {
        base: String,
        token: Option<String>,
        http: reqwest::Client,
    },
}

impl Client {
    pub async fn open(target: &Target, store: Option<EventStore>) -> anyhow::Result<Self> {
        if let Some(server) = &target.server {
            return Ok(Client::Remote {
                base: server.trim_end_matches('/').to_string(),
                token: target.token.clone(),
                http: reqwest::Client::new(),
            });
        }
        let store = store.context("no store to talk to")?;
        // No server follows the log here: bring the board's read models up to date
        // (the board starts from them and lists ended tasks from them).
        crate::projections::Projections::named(store.clone(), &["board", "agents"])
            .bring_up_to_date()
            .await?;
        let board = Board::open(store, system_clock(), BoardConfig::default()).await?;
        Ok(Client::Direct {
            board,
            by: Caller::User(actor(&target.by)),
        })
    }

    /// Call the server's API; an error answer becomes an error with its code.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<T> {
        let Client::Remote { base, token, http } = self else {
            bail!("not a remote client");
        };
        let mut request = http.request(method.clone(), format!("{base}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling {method} {base}{path}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .context("reading the server's answer")?;
        if !status.is_success() {
            let detail: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let code = detail["error"]["code"].as_str().unwrap_or("error");
            let message = detail["error"]["message"].as_str().unwrap_or(&text);
            bail!("the server answered {status} ({code}): {message}");
        }
        serde_json::from_str(&text)
            .with_context(|| format!("reading the answer of {method} {path}"))
    }
}
