//! Who may do what: bearer tokens, roles and the permission each role grants.
//!
//! A token is `awl_` followed by 64 hex digits (256 bits from the OS's random source);
//! the store keeps only its SHA-256 hash, so a leaked database does not leak tokens.
//! Roles: a viewer reads; an operator also sends tasks, answers, reviews, starts runs
//! and decides gates; an agent does its own tasks (its token's name is its agent id);
//! an admin may do everything, including managing tokens.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::domain::ids::AgentId;
use crate::store::{EventStore, StoreError, TokenRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Operator,
    Agent,
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Operator, Role::Agent, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Agent => "agent",
            Role::Viewer => "viewer",
        }
    }

    /// Whether this role grants `permission`.
    pub fn allows(self, permission: Permission) -> bool {
        match permission {
            Permission::Public => true,
            Permission::Read => matches!(self, Role::Admin | Role::Operator | Role::Viewer),
            Permission::ReadOwn => true,
            Permission::Operate => matches!(self, Role::Admin | Role::Operator),
            Permission::Work => matches!(self, Role::Admin | Role::Agent),
            Permission::Connect => true,
            Permission::Admin => self == Role::Admin,
        }
    }
}

impl Role {
    /// The role with its article, for messages: `an admin`, `a viewer`.
    pub fn with_article(self) -> String {
        match self.as_str() {
            name @ ("admin" | "operator" | "agent") => format!("an {name}"),
            name => format!("a {name}"),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "agent" => Ok(Role::Agent),
            "viewer" => Ok(Role::Viewer),
            other => Err(format!(
                "unknown role {other:?}: expected admin, operator, agent or viewer"
            )),
        }
    }
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// No token needed (health).
    Public,
    /// Read the board, runs and the log.
    Read,
    /// Read one task: readers, or the agent holding it (the handler checks which).
    #[serde(rename = "read_own")]
    ReadOwn,
    /// Send, answer, review, cancel, start runs, decide gates.
    Operate,
    /// An agent's own work: register, wait, ack, report, submit, complete, fail.
    Work,
    /// Any valid token (the MCP endpoint: each tool checks its own permission).
    Connect,
    /// Manage tokens.
    Admin,
}

/// The caller of a request, as its token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The team the token acts for.
    pub team: Option<String>,
}

impl Principal {
    /// The caller when auth is off (no tokens exist; the server listens on loopback).
    pub fn local() -> Self {
        Principal {
            name: "local".into(),
            role: Role::Admin,
            team: None,
        }
    }

    /// An anonymous caller of a public route.
    pub fn local_public() -> Self {
        Principal {
            name: "anonymous".into(),
            role: Role::Viewer,
            team: None,
        }
    }

    /// Whose history this caller's actions belong to and whose learning it sees:
    /// `team:NAME` for a token of a team, else `user:NAME`.
    pub fn scope(&self) -> String {
        match &self.team {
            Some(team) => format!("team:{team}"),
            None => format!("user:{}", self.name),
        }
    }

    pub fn may(&self, permission: Permission) -> bool {
        self.role.allows(permission)
    }

    /// The agent an agent token speaks for (its name).
    pub fn agent_id(&self) -> Option<AgentId> {
        (self.role == Role::Agent)
            .then(|| AgentId::try_from(self.name.as_str()).ok())
            .flatten()
    }
}

/// A new secret token: `awl_` and 64 hex digits.
pub fn generate_token() -> String {
    let mut hex = String::with_capacity(68);
    hex.push_str("awl_");
    for _ in 0..2 {
        // v4 UUIDs are 122 random bits from getrandom (the OS's CSPRNG); two give 244.
        hex.push_str(&Uuid::new_v4().simple().to_string());
    }
    hex
}

/// The stored form of a token.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    hex::encode(digest)
}

/// Create a token: returns its record and the secret, which is never stored.
pub async fn create_token(
    store: &EventStore,
    name: &str,
    role: Role,
    by: &str,
    now: DateTime<Utc>,
) -> Result<(TokenRecord, String), StoreError> {
    create_team_token(store, name, role, None, by, now).await
}

/// Create a token that acts for `team` (learning's scope), or for its own name.
pub async fn create_team_token(
    store: &EventStore,
    name: &str,
    role: Role,
    team: Option<&str>,
    by: &str,
    now: DateTime<Utc>,
) -> Result<(TokenRecord, String), StoreError> {
    if let Some(team) = team
        && (team.is_empty()
            || team.len() > 100
            || !team
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(StoreError::Refused(format!(
            "team {team:?}: 1 to 100 letters, digits, '-', '_' or '.'"
        )));
    }
    if role == Role::Agent {
        AgentId::try_from(name).map_err(|e| {
            StoreError::Refused(format!("an agent token is named after its agent: {e}"))
        })?;
    } else if name.trim().is_empty() || name.len() > 200 {
        return Err(StoreError::Refused(
            "a token's name must be 1 to 200 characters".into(),
        ));
    }
    let secret = generate_token();
    let record = TokenRecord {
        id: Uuid::new_v4(),
        name: name.to_string(),
        role: role.as_str().to_string(),
        created_by: by.to_string(),
        created_at: now,
        revoked_at: None,
        team: team.map(str::to_string),
    };
    store.insert_token(&record, &hash_token(&secret)).await?;
    Ok((record, secret))
}

/// Checks bearer tokens against the store, remembering answers for a short time so a
/// busy agent does not cost a query per call (a revocation takes effect within it).
pub struct TokenVerifier {
    store: EventStore,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Option<Principal>)>>,
}

impl TokenVerifier {
    pub fn new(store: EventStore, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The principal of `token`, or `None` if it is unknown or revoked.
    pub async fn verify(&self, token: &str) -> Result<Option<Principal>, StoreError> {
        let hash = hash_token(token);
        if let Ok(cache) = self.cache.lock()
            && let Some((at, principal)) = cache.get(&hash)
            && at.elapsed() < self.ttl
        {
            return Ok(principal.clone());
        }
        let principal = self.store.token_by_hash(&hash).await?.and_then(|r| {
            Some(Principal {
                role: r.role.parse().ok()?,
                name: r.name,
                team: r.team,
            })
        });
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() > 10_000 {
                cache.clear();
            }
            cache.insert(hash, (Instant::now(), principal.clone()));
        }
        Ok(principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_stored_as_a_hash() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with("awl_") && a.len() == 68, "{a}");
        assert!(a[4..].chars().all(|c| c.is_ascii_hexdigit()));
        let h = hash_token(&a);
        assert_eq!(h.len(), 64);
        assert_ne!(h, a);
        assert_eq!(h, hash_token(&a));
    }

    #[test]
    fn a_token_hash_is_lowercase_hex_sha256_as_stored_by_every_version() {
        // Tokens are found by their stored hash: its text must never change.
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hash_token(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn each_role_grants_what_it_says() {
        use Permission::*;
        let table = [
            (Role::Admin, [true, true, true, true, true, true, true]),
            (Role::Operator, [true, true, true, true, false, true, false]),
            (Role::Agent, [true, false, true, false, true, true, false]),
            (Role::Viewer, [true, true, true, false, false, true, false]),
        ];
        for (role, expect) in table {
            let got =
                [Public, Read, ReadOwn, Operate, Work, Connect, Admin].map(|p| role.allows(p));
            assert_eq!(got, expect, "{role}");
        }
    }

    #[test]
    fn an_agent_token_speaks_for_the_agent_it_is_named_after() {
        let p = Principal {
            name: "claude-1".into(),
            role: Role::Agent,
            team: None,
        };
        assert_eq!(p.agent_id(), Some(AgentId::try_from("claude-1").unwrap()));
        let op = Principal {
            name: "ops".into(),
            role: Role::Operator,
            team: Some("platform".into()),
        };
        assert_eq!(p.scope(), "user:claude-1");
        assert_eq!(op.scope(), "team:platform");
        assert_eq!(op.agent_id(), None);
        assert_eq!(
            "root".parse::<Role>().unwrap_err(),
            "unknown role \"root\": expected admin, operator, agent or viewer"
        );
    }
}
