//! Just enough of CEL's lexical structure to work on expression text safely.
//!
//! Two jobs need to look at expression text before CEL parses it: translating the
//! `$`-shorthand ([`super::shorthand`]) and finding the `}}` that closes a `${{`
//! segment ([`super::template`]). Both must leave string literals and comments
//! alone: a `$` or a `}}` inside `'...'` is data, not syntax. This lexer knows
//! CEL's string and bytes literals (single, double and triple quotes, the `r`
//! and `b` prefixes, backslash escapes) and `//` comments, and hands every other
//! character back one at a time. It works on bytes: every character it acts on is
//! ASCII, and a UTF-8 continuation byte never equals an ASCII byte, so positions
//! it returns are always on character boundaries.

/// Where a `//` comment ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommentEnd {
    /// At the end of the line, as in CEL.
    Newline,
    /// At the end of the line or at a `}}`, whichever comes first: inside a
    /// `${{ }}` segment the comment cannot swallow the segment's end.
    NewlineOrBraces,
}

/// One token. Positions are byte offsets into the scanned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token {
    /// A run of `[A-Za-z0-9_]`: an identifier, a keyword or a number.
    Word { start: usize, end: usize },
    /// A string or bytes literal, prefix and quotes included. `terminated` is
    /// false when the text ends (or, for a single-line literal, the line ends)
    /// before the closing quote.
    Literal {
        start: usize,
        end: usize,
        terminated: bool,
    },
    /// A `//` comment, up to (not including) what ends it.
    Comment { start: usize, end: usize },
    /// Any other character.
    Char { pos: usize, ch: char },
}

pub(super) struct Lexer<'a> {
    src: &'a str,
    /// The next byte to look at. Callers that consume text themselves (the
    /// shorthand translator reading a reference) move it forward.
    pub(super) pos: usize,
    comments: CommentEnd,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(src: &'a str, pos: usize, comments: CommentEnd) -> Self {
        Lexer { src, pos, comments }
    }

    pub(super) fn next_token(&mut self) -> Option<Token> {
        let bytes = self.src.as_bytes();
        let start = self.pos;
        let &b = bytes.get(start)?;
        if is_word_byte(b) {
            let end = word_end(bytes, start);
            if is_literal_prefix(&bytes[start..end]) && matches!(bytes.get(end), Some(b'\'' | b'"'))
            {
                let raw = bytes[start..end]
                    .iter()
                    .any(|c| c.eq_ignore_ascii_case(&b'r'));
                return Some(self.literal(start, end, raw));
            }
            self.pos = end;
            return Some(Token::Word { start, end });
        }
        if b == b'\'' || b == b'"' {
            return Some(self.literal(start, start, false));
        }
        if b == b'/' && bytes.get(start + 1) == Some(&b'/') {
            let mut end = start + 2;
            while end < bytes.len() && bytes[end] != b'\n' {
                if self.comments == CommentEnd::NewlineOrBraces && bytes[end..].starts_with(b"}}") {
                    break;
                }
                end += 1;
            }
            self.pos = end;
            return Some(Token::Comment { start, end });
        }
        let ch = self.src.get(start..)?.chars().next()?;
        self.pos = start + ch.len_utf8();
        Some(Token::Char { pos: start, ch })
    }

    /// A literal whose prefix starts at `start` and whose opening quote is at `quote_at`.
    fn literal(&mut self, start: usize, quote_at: usize, raw: bool) -> Token {
        let bytes = self.src.as_bytes();
        let quote = bytes[quote_at];
        let triple = bytes[quote_at..].starts_with(&[quote, quote, quote]);
        let mut i = quote_at + if triple { 3 } else { 1 };
        let (end, terminated) = loop {
            let Some(&b) = bytes.get(i) else {
                break (bytes.len(), false);
            };
            if b == b'\\' && !raw {
                i = (i + 2).min(bytes.len());
                continue;
            }
            if triple {
                if bytes[i..].starts_with(&[quote, quote, quote]) {
                    break (i + 3, true);
                }
            } else if b == quote {
                break (i + 1, true);
            } else if b == b'\n' || b == b'\r' {
                break (i, false);
            }
            i += 1;
        };
        // An escape at the very end may have stepped into the middle of a
        // multi-byte character; the text ends there anyway.
        let end = if self.src.is_char_boundary(end) {
            end
        } else {
            bytes.len()
        };
        self.pos = end;
        Token::Literal {
            start,
            end,
            terminated,
        }
    }
}

pub(super) fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn word_end(bytes: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < bytes.len() && is_word_byte(bytes[end]) {
        end += 1;
    }
    end
}

/// `r`, `b`, `rb`, `br` in any case: the prefixes of a CEL raw or bytes literal.
fn is_literal_prefix(word: &[u8]) -> bool {
    let lower: Vec<u8> = word.iter().map(u8::to_ascii_lowercase).collect();
    matches!(lower.as_slice(), b"r" | b"b" | b"rb" | b"br")
}

#[cfg(test)]
mod tests;
