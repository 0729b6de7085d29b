use super::*;

fn allowed(entries: &[&str]) -> AllowedOrigins {
    let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
    AllowedOrigins::new(&entries).expect("valid entries")
}

#[test]
fn loopback_origins_pass_on_any_port() {
    let none = allowed(&[]);
    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1",
        "https://127.0.0.2:8443",
        "http://[::1]:8080",
    ] {
        assert!(none.allows(origin), "{origin}");
    }
}

#[test]
fn other_origins_are_refused_unless_listed() {
    let none = allowed(&[]);
    for origin in [
        "http://evil.example",
        "null",
        "",
        "http://localhost.evil.example",
        "http://127.0.0.1.evil.example",
        "file://",
        "http://user@localhost",
        "not an origin",
    ] {
        assert!(!none.allows(origin), "{origin:?} refused");
    }
    let listed = allowed(&["https://app.example.com", "http://dev.example:*"]);
    assert!(listed.allows("https://app.example.com"));
    assert!(
        listed.allows("https://APP.example.com:443"),
        "default port, any case"
    );
    assert!(
        !listed.allows("https://app.example.com:8443"),
        "another port"
    );
    assert!(!listed.allows("http://app.example.com"), "another scheme");
    assert!(listed.allows("http://dev.example:1234"), ":* is any port");
    assert!(!listed.allows("https://evil.example"));
}

#[test]
fn a_malformed_entry_is_refused_at_start() {
    for entry in ["app.example.com", "https://app.example.com/path", "ftp://x"] {
        let err = AllowedOrigins::new(&[entry.to_string()]).expect_err(entry);
        assert!(err.to_string().contains(entry), "{err}");
    }
}
