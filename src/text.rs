//! Text for messages, shared by every edge that reports what an outside thing said
//! (processes, servers, databases, models): cut to a size on a character boundary,
//! an error told with its causes, and the one character the log cannot hold (NUL)
//! found or replaced.

/// Cut `text` to at most `max` bytes on a character boundary, saying so.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// An error and its sources, `a: b: c`, without repeats.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// What stands in for a NUL character in text awl records: the replacement
/// character, as for bytes that are not UTF-8.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// Where the first NUL character in `value` is, in a string or an object key, as a
/// JSON pointer (`""` for the value itself). Postgres cannot hold it in JSONB, so
/// the log refuses it on every store.
pub fn nul_in(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    fn escaped(key: &str) -> String {
        key.replace('~', "~0").replace('/', "~1")
    }
    match value {
        Value::String(s) => s.contains('\0').then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| nul_in(v).map(|at| format!("/{i}{at}"))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                return Some(format!("/{}", escaped(k)));
            }
            nul_in(v).map(|at| format!("/{}{at}", escaped(k)))
        }),
        _ => None,
    }
}

/// Replace every NUL character in `text` by [`NUL_REPLACEMENT`].
pub fn replace_nul_in_text(text: &mut String) {
    if text.contains('\0') {
        *text = text.replace('\0', &NUL_REPLACEMENT.to_string());
    }
}

/// Replace every NUL character in `value`'s strings and object keys by
/// [`NUL_REPLACEMENT`].
pub fn replace_nul(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => replace_nul_in_text(s),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let old = std::mem::take(map);
                for (mut k, v) in old {
                    replace_nul_in_text(&mut k);
                    map.insert(k, v);
                }
            }
            map.values_mut().for_each(replace_nul);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 3), "abc… (6 bytes in all)");
        // 'é' is two bytes: cutting at 2 would split it.
        assert_eq!(clip("aé", 2), "a… (3 bytes in all)");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn a_chain_says_each_cause_once() {
        let e = Outer(Inner(std::io::Error::other("disk")));
        // "outer: inner" already holds "inner": only the io error is added.
        assert_eq!(error_chain(&e), "outer: inner: disk");
    }

    #[test]
    fn a_nul_is_found_where_it_is() {
        assert_eq!(nul_in(&json!({"a": [1, "x"], "b": "ok"})), None);
        assert_eq!(nul_in(&json!("a\u{0}b")), Some(String::new()));
        assert_eq!(
            nul_in(&json!({"a": [1, "x\u{0}"]})),
            Some("/a/1".to_string())
        );
        assert_eq!(
            nul_in(&json!({"a/b~": {"k\u{0}": 1}})),
            Some("/a~1b~0/k\u{0}".to_string())
        );
    }

    #[test]
    fn nuls_are_replaced_in_strings_and_keys() {
        let mut value = json!({"out": "a\u{0}b", "list": ["\u{0}"], "k\u{0}": {"n": 1}});
        replace_nul(&mut value);
        assert_eq!(
            value,
            json!({"out": "a\u{FFFD}b", "list": ["\u{FFFD}"], "k\u{FFFD}": {"n": 1}})
        );
        assert_eq!(nul_in(&value), None);
        let mut text = "x\u{0}".to_string();
        replace_nul_in_text(&mut text);
        assert_eq!(text, "x\u{FFFD}");
    }
}
