//! Incoming requests from Slack and Discord, checked before anything is read from
//! them: Slack's `v0` HMAC-SHA256 signature of `v0:TIMESTAMP:BODY` under the app's
//! signing secret, Discord's Ed25519 signature of `TIMESTAMP || BODY` under the
//! application's public key; the timestamp within five minutes of now (stale or
//! future requests are refused), and a signature seen before within that window
//! refused as a replay. Comparisons are constant-time (ring).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use ring::{hmac, signature};

/// How far a request's timestamp may be from now, in seconds (Slack's documented
/// window; used for Discord too).
pub const WINDOW_SECONDS: i64 = 300;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the request is not signed: {0} is missing")]
    Unsigned(&'static str),
    #[error("the request's timestamp {0:?} is not a number of seconds")]
    BadTimestamp(String),
    #[error("the request's timestamp is {0} s from now: outside the {WINDOW_SECONDS} s window")]
    Stale(i64),
    #[error("the request's signature does not match its body")]
    Forged,
    #[error("the request was sent before: a replay")]
    Replayed,
    #[error("incoming requests from {0} are not configured (no signing key)")]
    NotConfigured(&'static str),
}

/// The seconds of `timestamp`, if within the window of `now`.
fn in_window(timestamp: &str, now: DateTime<Utc>) -> Result<i64, Refused> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| Refused::BadTimestamp(timestamp.to_string()))?;
    let skew = now.timestamp() - ts;
    if skew.abs() > WINDOW_SECONDS {
        return Err(Refused::Stale(skew));
    }
    Ok(ts)
}

/// Check a Slack request: `X-Slack-Request-Timestamp` and `X-Slack-Signature`.
pub fn slack(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<(), Refused> {
    let timestamp = timestamp.ok_or(Refused::Unsigned("X-Slack-Request-Timestamp"))?;
    let signature = signature.ok_or(Refused::Unsigned("X-Slack-Signature"))?;
    in_window(timestamp, now)?;
    let tag = signature
        .strip_prefix("v0=")
        .and_then(|tag| hex::decode(tag).ok())
        .ok_or(Refused::Forged)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut content = format!("v0:{timestamp}:").into_bytes();
    content.extend_from_slice(body);
    hmac::verify(&key, &content, &tag).map_err(|_| Refused::Forged)
}

/// Slack's signature of `body` at `timestamp` (what Slack sends; awl's own test
/// messages and the CLI use it).
pub fn slack_signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut content = format!("v0:{timestamp}:").into_bytes();
    content.extend_from_slice(body);
    format!("v0={}", hex::encode(hmac::sign(&key, &content).as_ref()))
}

/// An Ed25519 public key given as hex, if it is one.
pub fn public_key(text: &str) -> Option<Vec<u8>> {
    hex::decode(text.trim()).ok().filter(|k| k.len() == 32)
}

/// Check a Discord request: `X-Signature-Ed25519` and `X-Signature-Timestamp`.
pub fn discord(
    public_key_hex: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<(), Refused> {
    let timestamp = timestamp.ok_or(Refused::Unsigned("X-Signature-Timestamp"))?;
    let signature = signature.ok_or(Refused::Unsigned("X-Signature-Ed25519"))?;
    in_window(timestamp, now)?;
    let key = public_key(public_key_hex).ok_or(Refused::NotConfigured("discord"))?;
    let sig = hex::decode(signature).map_err(|_| Refused::Forged)?;
    let mut message = timestamp.as_bytes().to_vec();
    message.extend_from_slice(body);
    signature::UnparsedPublicKey::new(&signature::ED25519, key)
        .verify(&message, &sig)
        .map_err(|_| Refused::Forged)
}

/// Signatures seen within the window, so a request sent again is refused.
#[derive(Debug, Default)]
pub struct Replays {
    seen: Mutex<Seen>,
}

/// Each signature seen and its time, and the same in the order they were seen.
type Seen = (HashMap<String, i64>, VecDeque<(i64, String)>);

impl Replays {
    /// Remember `signature` (of a request at `timestamp`); a second sight is a replay.
    pub fn first_sight(
        &self,
        signature: &str,
        timestamp: &str,
        now: DateTime<Utc>,
    ) -> Result<(), Refused> {
        let ts = in_window(timestamp, now)?;
        let Ok(mut guard) = self.seen.lock() else {
            return Ok(());
        };
        let (seen, order) = &mut *guard;
        let horizon = now.timestamp() - WINDOW_SECONDS;
        while order.front().is_some_and(|(t, _)| *t < horizon) {
            if let Some((_, old)) = order.pop_front() {
                seen.remove(&old);
            }
        }
        if seen.contains_key(signature) {
            return Err(Refused::Replayed);
        }
        seen.insert(signature.to_string(), ts);
        order.push_back((ts.max(horizon), signature.to_string()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(ts: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(ts, 0).unwrap()
    }

    /// Slack's documented example ("Verifying requests from Slack").
    #[test]
    fn slacks_documented_example_verifies() {
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(
            slack_signature(secret, 1531420618, body.as_bytes()),
            expected
        );
        let now = at(1531420618 + 10);
        assert_eq!(
            slack(
                secret,
                Some("1531420618"),
                Some(expected),
                body.as_bytes(),
                now
            ),
            Ok(())
        );
        let forged = body.replace("roadrunner", "coyote");
        assert_eq!(
            slack(
                secret,
                Some("1531420618"),
                Some(expected),
                forged.as_bytes(),
                now
            ),
            Err(Refused::Forged)
        );
        assert_eq!(
            slack(
                secret,
                Some("1531420618"),
                Some(expected),
                body.as_bytes(),
                at(1531420618 + 301)
            ),
            Err(Refused::Stale(301))
        );
        assert_eq!(
            slack(secret, None, Some(expected), body.as_bytes(), now),
            Err(Refused::Unsigned("X-Slack-Request-Timestamp"))
        );
        assert_eq!(
            slack(
                secret,
                Some("yesterday"),
                Some(expected),
                body.as_bytes(),
                now
            ),
            Err(Refused::BadTimestamp("yesterday".into()))
        );
    }

    #[test]
    fn a_discord_signature_verifies_and_a_forged_one_does_not() {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        use ring::signature::KeyPair;
        let public = hex::encode(pair.public_key().as_ref());
        let body = br#"{"type":1}"#;
        let ts = "1764144000";
        let mut message = ts.as_bytes().to_vec();
        message.extend_from_slice(body);
        let sig = hex::encode(pair.sign(&message).as_ref());
        let now = at(1764144000);
        assert_eq!(discord(&public, Some(ts), Some(&sig), body, now), Ok(()));
        assert_eq!(
            discord(&public, Some(ts), Some(&sig), br#"{"type":2}"#, now),
            Err(Refused::Forged)
        );
        assert_eq!(
            discord(&public, Some("1764143000"), Some(&sig), body, now),
            Err(Refused::Stale(1000))
        );
        for malformed in ["zz", &sig[1..], ""] {
            assert_eq!(
                discord(&public, Some(ts), Some(malformed), body, now),
                Err(Refused::Forged),
                "{malformed}"
            );
        }
        assert!(public_key(&public).is_some());
        assert!(public_key("abc").is_none());
    }

    #[test]
    fn a_signature_seen_twice_is_a_replay() {
        let replays = Replays::default();
        let now = at(1764144000);
        assert_eq!(replays.first_sight("v0=aa", "1764144000", now), Ok(()));
        assert_eq!(replays.first_sight("v0=bb", "1764144000", now), Ok(()));
        assert_eq!(
            replays.first_sight("v0=aa", "1764144000", now),
            Err(Refused::Replayed)
        );
        // Long after, the first sight has left the window (and so would its request).
        let later = at(1764144000 + 1000);
        assert_eq!(replays.first_sight("v0=cc", "1764145000", later), Ok(()));
    }
}
