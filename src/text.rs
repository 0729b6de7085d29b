//! Text for messages, shared by every edge that reports what an outside thing said
//! (processes, servers, databases, models): cut to a size on a character boundary,
//! and an error told with its causes.

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

#[cfg(test)]
mod tests {
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
}
