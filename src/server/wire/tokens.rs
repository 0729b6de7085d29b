//! Tokens on the wire (admin only).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::TokenRecord;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// For an agent token, the agent's id.
    pub name: String,
    /// admin, operator, agent or viewer.
    pub role: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRecord> for TokenView {
    fn from(r: TokenRecord) -> Self {
        TokenView {
            id: r.id,
            name: r.name,
            role: r.role,
            created_by: r.created_by,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CreatedToken {
    /// Shown once: only its hash is stored.
    pub token: String,
    #[serde(flatten)]
    pub record: TokenView,
}
