use super::*;

#[test]
fn idempotency_keys_are_visible_ascii_of_bounded_length_and_name_one_id_per_caller() {
    assert!(IdempotencyKey::try_from("").is_err());
    assert!(IdempotencyKey::try_from("x".repeat(256).as_str()).is_err());
    assert!(IdempotencyKey::try_from("caf\u{e9}").is_err());
    assert!(IdempotencyKey::try_from("a\tb").is_err());
    let key = IdempotencyKey::try_from("order 42").unwrap();
    let ns = Uuid::from_u128(1);
    assert_eq!(key.derive(&ns, "ada"), key.derive(&ns, "ada"));
    assert_ne!(key.derive(&ns, "ada"), key.derive(&ns, "bob"));
    assert_ne!(
        key.derive(&ns, "ada"),
        key.derive(&Uuid::from_u128(2), "ada")
    );
}

#[test]
fn names_are_checked_at_the_boundary() {
    assert!(AgentId::try_from("claude-1").is_ok());
    assert!(AgentId::try_from("org/agent.v2:main").is_ok());
    assert_eq!(
        AgentId::try_from(""),
        Err(IdError::Empty { kind: "agent id" })
    );
    assert_eq!(
        StepId::try_from("a b"),
        Err(IdError::BadCharacter {
            kind: "step id",
            value: "a b".into(),
            found: ' ',
        })
    );
    assert!(WorkflowName::try_from("x".repeat(MAX_NAME_LEN)).is_ok());
    assert_eq!(
        WorkflowName::try_from("x".repeat(MAX_NAME_LEN + 1)),
        Err(IdError::TooLong {
            kind: "workflow name",
            value: "x".repeat(MAX_NAME_LEN + 1),
            max: MAX_NAME_LEN,
        })
    );
}

#[test]
fn names_refuse_bad_values_when_deserialized() {
    let err = serde_json::from_str::<AgentId>("\"rm -rf\"").unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent id \"rm -rf\" may contain only letters, digits, '-', '_', '.', ':' and '/' \
         (found ' ')"
    );
}

#[test]
fn the_default_id_is_nil_and_reads_no_clock() {
    assert_eq!(RunId::default(), RunId::from_uuid(Uuid::nil()));
    assert_eq!(TaskId::default().as_uuid(), Uuid::nil());
    assert_ne!(RunId::new(), RunId::default());
    assert_eq!(RunId::new().as_uuid().get_version_num(), 7);
}

#[test]
fn uuid_ids_round_trip_and_name_what_failed() {
    let id = RunId::new();
    assert_eq!(id.to_string().parse::<RunId>(), Ok(id));
    let err = "nope".parse::<TaskId>().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("task id \"nope\" is not a UUID")
    );
}
