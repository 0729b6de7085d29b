use super::*;
use serde_json::json;

#[test]
fn converts_to_json_and_remembers_positions() {
    let source = "name: deploy\nversion: \"1.0\"\nsteps:\n  - id: build\n    type: shell\n    command: [cargo, build]\n  - id: ship\n    retry: {max_attempts: 3}\n";
    let (value, map) = parse(source).unwrap();
    assert_eq!(
        value,
        json!({
            "name": "deploy", "version": "1.0",
            "steps": [
                {"id": "build", "type": "shell", "command": ["cargo", "build"]},
                {"id": "ship", "retry": {"max_attempts": 3}}
            ]
        })
    );
    assert_eq!(map.value("/name"), Position { line: 1, column: 7 });
    assert_eq!(map.key("/version"), Position { line: 2, column: 1 });
    assert_eq!(
        map.value("/steps/0/type"),
        Position {
            line: 5,
            column: 11
        }
    );
    assert_eq!(map.key("/steps/1/retry"), Position { line: 8, column: 5 });
    assert_eq!(
        map.value("/steps/1/retry/max_attempts"),
        Position {
            line: 8,
            column: 27
        }
    );
    assert_eq!(
        map.value("/steps/0/command/1"),
        Position {
            line: 6,
            column: 22
        }
    );
    // An unknown pointer falls back to its closest known ancestor.
    assert_eq!(map.value("/steps/1/nope/deeper"), map.value("/steps/1"));
}

#[test]
fn malformed_yaml_says_what_and_where() {
    let err = parse("name: a\nsteps:\n  - id: [unclosed\n").unwrap_err();
    assert_eq!(err.position, Some(Position { line: 3, column: 9 }));
    assert_eq!(err.message, "unclosed bracket '['");
    let err = parse("name: a\nname: b\n").unwrap_err();
    assert_eq!(err.position, Some(Position { line: 2, column: 1 }));
    assert_eq!(
        err.message,
        "duplicate mapping key `name` is not allowed here"
    );
    let err = parse("a: 1\n? [x]\n: y\n").unwrap_err();
    assert_eq!(err.position, Some(Position { line: 2, column: 3 }));
}

#[test]
fn keys_and_leading_zeros_are_kept_as_written_and_only_true_and_false_are_booleans() {
    let source = "n: 1\nON: 2\n1.0: 3\n0x10: 4\ny: 5\n\"q\": 6\n~: 7\nvalues: [no, on, y, off, yes, true, False]\nzip: [01234, 0, 10, 1.5]\n";
    let (value, map) = parse(source).unwrap();
    assert_eq!(
        value,
        json!({
            "n": 1, "ON": 2, "1.0": 3, "0x10": 4, "y": 5, "q": 6, "null": 7,
            "values": ["no", "on", "y", "off", "yes", true, false],
            "zip": ["01234", 0, 10, 1.5]
        })
    );
    assert_eq!(map.key("/0x10"), Position { line: 4, column: 1 });
    assert_eq!(
        map.value("/values/6"),
        Position {
            line: 8,
            column: 37
        }
    );
}

#[test]
fn pointer_tokens_are_escaped() {
    let (_, map) = parse("a/b:\n  c~d: 1\n").unwrap();
    assert_eq!(map.value("/a~1b/c~0d"), Position { line: 2, column: 8 });
}
