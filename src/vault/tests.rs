use serde_json::{Value, json};

use super::reveal::{PERSONAL, reveal_string};
use super::*;

fn key() -> (KeyId, SubjectKey) {
    (
        KeyId::for_subject("customer:42"),
        SubjectKey::from_bytes(&[7u8; 32]).expect("32 bytes"),
    )
}

#[test]
fn a_mask_replaces_every_occurrence_longest_first() {
    let mask = Mask::new(["hunter22", "hunter22-admin", "abc"]);
    assert_eq!(
        mask.apply("pw hunter22-admin then hunter22, abc"),
        "pw [redacted] then [redacted], abc",
        "the longer secret is masked whole; a 3-character value is not masked"
    );
    let mut value = json!({"out": ["x hunter22 y", 1], "hunter22": true});
    mask.apply_to_value(&mut value);
    assert_eq!(
        value,
        json!({"out": ["x [redacted] y", 1], "[redacted]": true})
    );
}

#[test]
fn a_mask_catches_the_json_escaped_form() {
    let mask = Mask::new([r#"pa"ss\word"#]);
    let stdout = r#"{"password": "pa\"ss\\word"}"#;
    assert_eq!(mask.apply(stdout), r#"{"password": "[redacted]"}"#);
}

#[test]
fn sealing_is_deterministic_and_opens_to_the_value() {
    let (id, k) = key();
    let value = json!({"email": "a@example.com", "n": 3});
    let one = seal(Kind::Personal, &id, &k, &value);
    assert_eq!(
        one,
        seal(Kind::Personal, &id, &k, &value),
        "same text twice"
    );
    assert_ne!(one, seal(Kind::Personal, &id, &k, &json!("other")));
    assert!(!one.contains("example.com"));
    let envelope = parse(&one).expect("an envelope");
    assert_eq!(envelope.kind, Kind::Personal);
    assert_eq!(envelope.key_id, id);
    assert_eq!(open(&envelope, &k), Ok(value));
}

#[test]
fn a_relabelled_or_altered_envelope_does_not_open() {
    let (id, k) = key();
    let sealed = seal(Kind::Secret, &id, &k, &json!("s3cret-value"));
    let relabelled = sealed.replace(":secret:", ":personal:");
    let envelope = parse(&relabelled).expect("still parses");
    assert_eq!(open(&envelope, &k), Err(SealError::Tampered));
    let wrong_key = SubjectKey::from_bytes(&[8u8; 32]).expect("32 bytes");
    assert_eq!(
        open(&parse(&sealed).expect("parses"), &wrong_key),
        Err(SealError::Tampered)
    );
    assert!(parse("awl:sealed:v1:secret:nothex:abc").is_none());
    assert!(parse("plain text").is_none());
}

#[test]
fn readers_see_what_they_may() {
    let (id, k) = key();
    let secret_id = KeyId::for_run_secrets("r1");
    let secret_key = SubjectKey::from_bytes(&[9u8; 32]).expect("32 bytes");
    let doc = json!({
        "token": seal(Kind::Secret, &secret_id, &secret_key, &json!("tok-123456")),
        "email": seal(Kind::Personal, &id, &k, &json!("a@example.com")),
    });
    let mut keys = Keys::new();
    keys.insert(id.clone(), k.clone());
    keys.insert(secret_id.clone(), secret_key);
    let seen = |how, keys: &Keys| {
        let mut v = doc.clone();
        reveal(&mut v, keys, how);
        v
    };
    assert_eq!(
        seen(Reveal::Plain, &keys),
        json!({"token": "tok-123456", "email": "a@example.com"})
    );
    assert_eq!(
        seen(Reveal::View, &keys),
        json!({"token": REDACTED, "email": "a@example.com"})
    );
    assert_eq!(
        seen(Reveal::Hidden, &keys),
        json!({"token": REDACTED, "email": PERSONAL})
    );
    keys.remove(&id);
    assert_eq!(
        seen(Reveal::View, &keys),
        json!({"token": REDACTED, "email": ERASED})
    );
    assert_eq!(seen(Reveal::Plain, &keys)["email"], json!(ERASED));
    let mut ids = std::collections::BTreeSet::new();
    key_ids(&doc, &mut ids);
    assert_eq!(ids, [id, secret_id].into_iter().collect());
}

#[test]
fn a_protection_seals_whole_texts_that_hold_personal_data() {
    let (id, k) = key();
    let email = json!("a@example.com");
    let p = Protection {
        mask: Mask::new(["tok-123456"]),
        personal: Some(Personal::new(id.clone(), k.clone(), [&email])),
    };
    let mut text = "mail a@example.com with tok-123456".to_string();
    p.protect_text(&mut text);
    assert!(is_sealed(&text));
    let mut keys = Keys::new();
    keys.insert(id, k);
    reveal_string(&mut text, &keys, Reveal::Plain);
    assert_eq!(text, "mail a@example.com with [redacted]");
    let mut other: Value = json!({"n": "nothing personal"});
    p.protect_value(&mut other);
    assert_eq!(other, json!({"n": "nothing personal"}));
}

#[test]
fn key_ids_hide_the_subject() {
    let id = KeyId::for_subject("alice@example.com");
    assert_eq!(id.as_str().len(), 32);
    assert!(!id.as_str().contains("alice"));
    assert_eq!(KeyId::from_stored(id.as_str()), Some(id));
    assert_ne!(KeyId::for_subject("a"), KeyId::for_run_secrets("a"));
}
