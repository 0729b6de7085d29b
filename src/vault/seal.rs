//! The sealed envelope: `awl:sealed:v1:KIND:KEY:DATA`.
//!
//! `DATA` is base64url of nonce ‖ ciphertext ‖ tag, ChaCha20-Poly1305 (from `ring`,
//! already in the tree for TLS) over the JSON text of the value, with `KIND:KEY` as
//! associated data so an envelope cannot be relabelled. The nonce is the first 12
//! bytes of HMAC-SHA256(key, plaintext): deterministic (replaying a decision seals it
//! to the same text) and never shared by two plaintexts under one key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;
use sha2::{Digest, Sha256};

const PREFIX: &str = "awl:sealed:v1:";

/// Why a value could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the system's random number generator failed")]
    Random,
    #[error("a subject key must be 32 bytes, not {0}")]
    KeyLength(usize),
    #[error("the sealed value is malformed: {0}")]
    Malformed(&'static str),
    #[error("the sealed value does not open with its key (it was altered)")]
    Tampered,
}

/// What a sealed value is, which decides what readers see of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Secret,
    Personal,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "secret",
            Self::Personal => "personal",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "secret" => Some(Self::Secret),
            "personal" => Some(Self::Personal),
            _ => None,
        }
    }
}

/// The id of a subject's key: a hash of the subject, so the log and the key table
/// never hold the subject's name (which may itself be personal, like an email).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    pub fn for_subject(subject: &str) -> Self {
        let digest = Sha256::new()
            .chain_update(b"awl subject\0")
            .chain_update(subject.as_bytes())
            .finalize();
        Self(hex::encode(&digest[..16]))
    }

    /// The key a run's secret inputs are sealed with.
    pub fn for_run_secrets(run_id: &str) -> Self {
        Self::for_subject(&format!("run:{run_id}"))
    }

    /// A key id as read back (from an envelope or the key table).
    pub fn from_stored(id: &str) -> Option<Self> {
        (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| Self(id.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// 32 secret bytes. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SubjectKey([u8; 32]);

impl std::fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectKey(..)")
    }
}

impl SubjectKey {
    pub fn generate() -> Result<Self, SealError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SealError::Random)?;
        Ok(Self(bytes))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SealError> {
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| SealError::KeyLength(bytes.len()))?;
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn cipher(&self) -> LessSafeKey {
        // 32 bytes is ChaCha20-Poly1305's key length: this cannot fail.
        LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, &self.0).unwrap_or_else(|_| unreachable!()),
        )
    }

    fn nonce_for(&self, plaintext: &[u8]) -> [u8; 12] {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &self.0), plaintext);
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&tag.as_ref()[..12]);
        nonce
    }
}

/// Seal `value` under `key` (deterministic: the same inputs give the same text).
pub fn seal(kind: Kind, key_id: &KeyId, key: &SubjectKey, value: &Value) -> String {
    let mut data = value.to_string().into_bytes();
    let nonce = key.nonce_for(&data);
    let label = format!("{}:{}", kind.as_str(), key_id);
    // Sealing in place cannot fail for a buffer under ChaCha20's 256 GiB limit.
    if key
        .cipher()
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(label.as_bytes()),
            &mut data,
        )
        .is_err()
    {
        unreachable!("a JSON value over 256 GiB");
    }
    let mut out = Vec::with_capacity(12 + data.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&data);
    format!("{PREFIX}{label}:{}", URL_SAFE_NO_PAD.encode(out))
}

/// Is `text` a sealed value?
pub fn is_sealed(text: &str) -> bool {
    text.starts_with(PREFIX)
}

/// A sealed value, taken apart (not yet opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub kind: Kind,
    pub key_id: KeyId,
    data: &'a str,
    label: &'a str,
}

/// Take a sealed value apart; `None` if `text` is not one.
pub fn parse(text: &str) -> Option<Envelope<'_>> {
    let rest = text.strip_prefix(PREFIX)?;
    let mut parts = rest.splitn(3, ':');
    let kind = Kind::parse(parts.next()?)?;
    let key_id = KeyId::from_stored(parts.next()?)?;
    let data = parts.next()?;
    let label = &rest[..rest.len() - data.len() - 1];
    Some(Envelope {
        kind,
        key_id,
        data,
        label,
    })
}

/// Open an envelope with its key.
pub fn open(envelope: &Envelope<'_>, key: &SubjectKey) -> Result<Value, SealError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(envelope.data)
        .map_err(|_| SealError::Malformed("not base64"))?;
    if bytes.len() < 12 + CHACHA20_POLY1305.tag_len() {
        return Err(SealError::Malformed("too short"));
    }
    let (nonce, sealed) = bytes.split_at(12);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Tampered)?;
    let mut sealed = sealed.to_vec();
    let plain = key
        .cipher()
        .open_in_place(nonce, Aad::from(envelope.label.as_bytes()), &mut sealed)
        .map_err(|_| SealError::Tampered)?;
    serde_json::from_slice(plain).map_err(|_| SealError::Malformed("not JSON inside"))
}
