//! `awl token create|list|revoke`: API tokens, managed straight in the store (whoever
//! can reach the database is already its admin).

use chrono::Utc;
use clap::Subcommand;

use crate::auth::{Role, create_team_token};
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (once: only its hash is stored).
    Create {
        /// A name for the token; for an agent token, the agent's id.
        #[arg(long)]
        name: String,
        /// admin, operator, agent or viewer.
        #[arg(long)]
        role: Role,
        /// The team it acts for: learning keeps each team's history, proposals and
        /// suggestions apart (without one, the token's own name is its scope).
        #[arg(long)]
        team: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List tokens (never their secrets).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by name or id.
    Revoke { name: String },
}

pub async fn run(store: EventStore, command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            name,
            role,
            team,
            json,
        } => {
            let (record, token) = create_team_token(
                &store,
                &name,
                role,
                team.as_deref(),
                &actor(&None),
                Utc::now(),
            )
            .await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"token": token, "id": record.id, "name": record.name, "role": record.role, "team": record.team})
                );
            } else {
                eprintln!(
                    "created {} token {:?} ({}); it is shown only now:",
                    record.role, record.name, record.id
                );
                println!("{token}");
            }
        }
        TokenCommand::List { json } => {
            let tokens = store.tokens().await?;
            if json {
                let rows: Vec<_> = tokens
                    .iter()
                    .map(|t| {
                        serde_json::json!({"id": t.id, "name": t.name, "role": t.role, "created_by": t.created_by,
                            "created_at": t.created_at, "revoked_at": t.revoked_at})
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(rows));
            } else if tokens.is_empty() {
                println!("no tokens: `awl serve` runs without auth, on loopback only");
            } else {
                for t in tokens {
                    let state = match t.revoked_at {
                        Some(at) => format!("revoked {}", at.format("%Y-%m-%d %H:%M")),
                        None => "active".into(),
                    };
                    println!(
                        "{}  {:<8}  {:<24}  {}  created {} by {}",
                        t.id,
                        t.role,
                        t.name,
                        state,
                        t.created_at.format("%Y-%m-%d %H:%M"),
                        t.created_by
                    );
                }
            }
        }
        TokenCommand::Revoke { name } => {
            if !store.revoke_token(&name, Utc::now()).await? {
                anyhow::bail!("no active token named {name:?}");
            }
            println!("revoked {name}");
        }
    }
    Ok(())
}
