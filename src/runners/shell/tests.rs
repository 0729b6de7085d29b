use std::path::Path;

use super::*;
use crate::domain::ids::RunId;

fn attempt(base: &Path) -> Attempt<'_> {
    Attempt {
        run_id: RunId::new(),
        step_id: "s",
        attempt: 2,
        idempotency_key: "key-1",
        timeout: None,
        base_dir: base,
        mask: &crate::vault::mask::NO_SECRETS,
    }
}

fn step() -> ShellStep {
    ShellStep {
        command: None,
        script: None,
        shell: None,
        args: vec![],
        env: Default::default(),
        working_dir: None,
        stdin: None,
        max_output_bytes: None,
        success_exit_codes: vec![],
    }
}

#[test]
fn capture_keeps_up_to_the_cap_and_marks_truncation() {
    let mut c = Captured::default();
    c.push(b"hello", 8);
    assert!(!c.truncated);
    c.push(b"world", 8);
    assert_eq!(c.kept, b"hellowor");
    assert!(c.truncated);
    c.push(b"more", 8);
    assert_eq!(c.kept, b"hellowor");
    let mut exact = Captured::default();
    exact.push(b"12345678", 8);
    assert!(!exact.truncated, "exactly the cap is not truncated");
}

#[test]
fn a_character_cut_by_the_cap_is_left_out() {
    // "é" is C3 A9, "€" is E2 82 AC, "😀" is F0 9F 98 80.
    let cut = |text: &str, cap: u64| {
        let mut c = Captured::default();
        c.push(text.as_bytes(), cap);
        c.text().into_owned()
    };
    assert_eq!(cut("aé", 2), "a");
    assert_eq!(cut("a€", 2), "a");
    assert_eq!(cut("a€", 3), "a");
    assert_eq!(cut("a😀", 4), "a");
    assert_eq!(cut("aéb", 3), "aé", "a complete character stays");
    assert_eq!(cut("a😀b", 5), "a😀");
    assert_eq!(cut("abc", 2), "ab");
    // Invalid bytes that were not cut are still shown as replaced.
    let mut c = Captured::default();
    c.push(b"\xff\xffabc", 3);
    assert_eq!(c.text(), "\u{fffd}\u{fffd}a");
    // Nothing is dropped from an output that was not cut.
    let mut c = Captured::default();
    c.push(&"aé".as_bytes()[..2], 8);
    assert_eq!(c.text(), "a\u{fffd}");
}

#[test]
fn command_and_script_are_exclusive() {
    let base = Path::new("/");
    let a = attempt(base);
    let mut s = step();
    assert_eq!(
        prepare(&a, &s, 10).unwrap_err().class,
        ErrorClass::Validation
    );
    s.command = Some(vec!["echo".into()]);
    s.script = Some("echo".into());
    assert_eq!(
        prepare(&a, &s, 10).unwrap_err().class,
        ErrorClass::Validation
    );
    s.script = None;
    s.command = Some(vec![]);
    assert_eq!(
        prepare(&a, &s, 10).unwrap_err().class,
        ErrorClass::Validation
    );
}

#[test]
fn a_script_gets_its_values_as_positional_arguments() {
    let base = Path::new("/");
    let a = attempt(base);
    let mut s = step();
    s.script = Some(r#"echo "$1""#.into());
    s.args = vec!["$(id)".into()];
    let p = prepare(&a, &s, 10).expect("prepared");
    assert_eq!(p.program, "sh");
    assert_eq!(p.args, ["-c", r#"echo "$1""#, "awl", "$(id)"]);
    assert!(p.breaker_key().starts_with("sh script "));
}

#[test]
fn the_environment_is_minimal_and_awl_variables_are_reserved() {
    let base = Path::new("/");
    let a = attempt(base);
    let mut s = step();
    s.command = Some(vec!["env".into()]);
    s.env.insert("GREETING".into(), "hi".into());
    let p = prepare(&a, &s, 10).expect("prepared");
    let names: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
    for name in &names {
        assert!(
            INHERITED_ENV.contains(name) || RESERVED_ENV.contains(name) || *name == "GREETING",
            "unexpected variable {name}"
        );
    }
    assert!(p.env.contains(&("AWL_ATTEMPT".into(), "2".into())));
    assert!(
        p.env
            .contains(&("AWL_IDEMPOTENCY_KEY".into(), "key-1".into()))
    );

    s.env.insert("AWL_RUN_ID".into(), "spoofed".into());
    let err = prepare(&a, &s, 10).unwrap_err();
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(err.message.contains("AWL_RUN_ID"), "{}", err.message);
}

#[test]
fn nul_bytes_and_bad_env_names_are_refused() {
    let base = Path::new("/");
    let a = attempt(base);
    let mut s = step();
    s.command = Some(vec!["echo".into(), "a\0b".into()]);
    assert_eq!(
        prepare(&a, &s, 10).unwrap_err().class,
        ErrorClass::Validation
    );
    s.command = Some(vec!["echo".into()]);
    s.env.insert("A=B".into(), "x".into());
    assert_eq!(
        prepare(&a, &s, 10).unwrap_err().class,
        ErrorClass::Validation
    );
}

#[test]
fn exit_statuses_are_classified() {
    let p = Prepared {
        program: "x".into(),
        args: vec![],
        env: vec![],
        dir: PathBuf::from("/"),
        stdin: None,
        cap: 10,
        success_codes: vec![0, 3],
        label: "`x`".into(),
        breaker_key: "x".into(),
    };
    let out = Captured {
        kept: b"{\"a\":1}".to_vec(),
        truncated: false,
    };
    let err = Captured {
        kept: b"boom".to_vec(),
        truncated: false,
    };
    let ok = classify_exit(&p, ExitStatus::from_raw(3 << 8), &out, &err).expect("3 is a success");
    assert_eq!(ok.output["json"], json!({"a": 1}));
    assert_eq!(ok.output["exit_code"], json!(3));

    let failed = classify_exit(&p, ExitStatus::from_raw(1 << 8), &out, &err).unwrap_err();
    assert_eq!(failed.class, ErrorClass::Unknown);
    assert!(failed.message.contains("code 1"), "{}", failed.message);
    assert!(failed.message.contains("boom"), "{}", failed.message);
    assert_eq!(failed.output.expect("output")["stderr"], "boom");

    let missing = classify_exit(&p, ExitStatus::from_raw(127 << 8), &out, &err).unwrap_err();
    assert_eq!(missing.class, ErrorClass::Dependency);

    let killed = classify_exit(&p, ExitStatus::from_raw(9), &out, &err).unwrap_err();
    assert_eq!(killed.class, ErrorClass::Unknown);
    assert!(killed.message.contains("SIGKILL"), "{}", killed.message);
    assert_eq!(
        killed.output.expect("output")["signal"],
        "signal 9 (SIGKILL)"
    );
}

#[test]
fn spawn_errors_are_classified() {
    use std::io::{Error, ErrorKind};
    let p = Prepared {
        program: "x".into(),
        args: vec![],
        env: vec![],
        dir: PathBuf::from("/"),
        stdin: None,
        cap: 10,
        success_codes: vec![0],
        label: "`x`".into(),
        breaker_key: "x".into(),
    };
    let class = |kind| spawn_failure(&p, &Error::from(kind)).class;
    assert_eq!(class(ErrorKind::NotFound), ErrorClass::Dependency);
    assert_eq!(class(ErrorKind::PermissionDenied), ErrorClass::Dependency);
    assert_eq!(class(ErrorKind::InvalidInput), ErrorClass::Validation);
    assert_eq!(class(ErrorKind::Other), ErrorClass::Unknown);
}

#[test]
fn failure_messages_quote_the_end_of_stderr() {
    let captured = |text: &str| Captured {
        kept: text.as_bytes().to_vec(),
        truncated: false,
    };
    assert_eq!(stderr_excerpt(&captured(" \n")), "");
    assert_eq!(stderr_excerpt(&captured("  boom\n")), "; stderr: boom");
    // 'é' is two bytes: the last 500 bytes start in the middle of one.
    let long = format!("{}{}", "é".repeat(300), "x".repeat(99));
    assert_eq!(
        stderr_excerpt(&captured(&long)),
        format!("; stderr: …{}{}", "é".repeat(200), "x".repeat(99))
    );
}

#[test]
fn truncated_stdout_is_not_parsed_as_json() {
    let out = Captured {
        kept: b"[1,2]".to_vec(),
        truncated: true,
    };
    let v = output_json(&out, &Captured::default(), Some(0), None);
    assert!(v.get("json").is_none());
    assert_eq!(v["stdout_truncated"], true);
    assert!(v.get("stderr_truncated").is_none());
}
