//! Problems found in a workflow file, each with its file, line, column and field.

use std::fmt;
use std::path::{Path, PathBuf};

use super::yaml::Position;

/// One problem in a workflow file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub position: Position,
    /// The field, as a path: `steps[2].retry.backoff` (empty for the whole file).
    pub field: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.position)?;
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in one or more files, in file and line order.
#[derive(Debug, Clone, PartialEq, Eq, Default, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }

    pub(crate) fn sorted(mut self) -> Self {
        self.0
            .sort_by(|a, b| (&a.file, a.position, &a.field).cmp(&(&b.file, b.position, &b.field)));
        self.0.dedup();
        self
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// A JSON pointer (`/steps/2/retry`) as a field path (`steps[2].retry`).
pub fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{token}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token);
        }
    }
    out
}

/// Collects diagnostics for one file.
pub(crate) struct Reporter<'a> {
    pub file: &'a Path,
    pub source: &'a str,
    pub map: &'a super::yaml::SourceMap,
    pub found: Vec<Diagnostic>,
}

impl<'a> Reporter<'a> {
    pub fn new(file: &'a Path, source: &'a str, map: &'a super::yaml::SourceMap) -> Self {
        Self {
            file,
            source,
            map,
            found: Vec::new(),
        }
    }

    /// A problem `offset` bytes into the string at `pointer` (an expression error),
    /// `text` being the string's value. The position is that of the character in
    /// the file, whatever the scalar's style: plain or quoted (escapes such as `\t`
    /// and `''` count as the characters they are written with), over several lines,
    /// or a `|` / `>` block. Falls back to the value's position when the value is an
    /// alias or its text cannot be matched.
    pub fn at_offset(
        &mut self,
        pointer: &str,
        text: &str,
        offset: usize,
        message: impl Into<String>,
    ) {
        let start = self.map.value(pointer);
        let index = text.get(..offset).unwrap_or(text).chars().count();
        let position = self
            .map
            .span(pointer)
            .filter(|span| position_of(self.source, span.start) == Some(start))
            .and_then(|span| {
                let raw = self.source.get(span.clone())?;
                let indent = usize::try_from(start.column.saturating_sub(1)).ok()?;
                let quoted = !is_block_content(self.source, span.start);
                let within = scalar_offset(raw, text, index, indent, quoted)?;
                position_of(self.source, span.start + within)
            })
            .unwrap_or(start);
        self.push(position, pointer, message);
    }

    /// A problem with the value at `pointer`.
    pub fn at_value(&mut self, pointer: &str, message: impl Into<String>) {
        let position = self.map.value(pointer);
        self.push(position, pointer, message);
    }

    /// A problem with the key of `pointer` (an unknown field, say).
    pub fn at_key(&mut self, pointer: &str, message: impl Into<String>) {
        let position = self.map.key(pointer);
        self.push(position, pointer, message);
    }

    pub fn push(&mut self, position: Position, pointer: &str, message: impl Into<String>) {
        self.found.push(Diagnostic {
            file: self.file.to_path_buf(),
            position,
            field: field_path(pointer),
            message: message.into(),
        });
    }
}

/// The line and column (characters, from 1) of byte `offset` of `source`.
fn position_of(source: &str, offset: usize) -> Option<Position> {
    let before = source.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Some(Position {
        line: before.matches('\n').count() as u64 + 1,
        column: before[line_start..].chars().count() as u64 + 1,
    })
}

/// Whether the scalar starting at byte `start` of `source` is the content of a `|` or
/// `>` block (whose first character may be a quote that is content): nothing but
/// indentation before it on its line, and the last non-blank line before it ends
/// with a block indicator (`|`, `>-`, `|2+`...), a comment aside.
fn is_block_content(source: &str, start: usize) -> bool {
    let Some(before) = source.get(..start) else {
        return false;
    };
    let (earlier, line) = before.rsplit_once('\n').unwrap_or(("", before));
    if !line.trim().is_empty() {
        return false;
    }
    let Some(header) = earlier.lines().rev().find(|l| !l.trim().is_empty()) else {
        return false;
    };
    let tokens: Vec<&str> = header.split_whitespace().collect();
    let end = tokens
        .iter()
        .position(|t| t.starts_with('#'))
        .unwrap_or(tokens.len());
    tokens[..end].last().is_some_and(|t| is_block_indicator(t))
}

/// `|` or `>`, then a chomping indicator and an indentation digit in either order.
fn is_block_indicator(token: &str) -> bool {
    let mut chars = token.chars();
    if !matches!(chars.next(), Some('|' | '>')) {
        return false;
    }
    let rest: Vec<char> = chars.collect();
    let chomp = |c: &char| matches!(c, '+' | '-');
    let digit = |c: &char| matches!(c, '1'..='9');
    match rest.as_slice() {
        [] => true,
        [a] => chomp(a) || digit(a),
        [a, b] => (chomp(a) && digit(b)) || (digit(a) && chomp(b)),
        _ => false,
    }
}

/// Where character `index` of `decoded` (a scalar's value) was written in `raw`
/// (the scalar as written, quotes included), as a byte offset into `raw`; `index`
/// equal to the length of `decoded` is just after its last character.
///
/// The characters are matched in order: an escape (`\t`, `\u00e9`) or a doubled
/// quote is the one character it stands for, a line break is a folded space or a
/// kept line break, the first `indent` spaces of a line are indentation, and
/// anything else the value does not contain (quotes, more indentation, trailing
/// spaces, a folded line's `\r`) is passed over.
fn scalar_offset(
    raw: &str,
    decoded: &str,
    index: usize,
    indent: usize,
    may_be_quoted: bool,
) -> Option<usize> {
    let bytes = raw.as_bytes();
    let quote = bytes
        .first()
        .copied()
        .filter(|b| may_be_quoted && (*b == b'"' || *b == b'\''));
    let mut at = usize::from(quote.is_some());
    for (i, want) in decoded.chars().enumerate() {
        let found = loop {
            let c = raw.get(at..)?.chars().next()?;
            let here = at;
            at += c.len_utf8();
            match c {
                '\n' => {
                    let mut spaces = 0;
                    while spaces < indent && bytes.get(at) == Some(&b' ') {
                        at += 1;
                        spaces += 1;
                    }
                    if want == '\n' || want == ' ' {
                        break here;
                    }
                }
                '\\' if quote == Some(b'"') => {
                    let escaped = raw.get(at..)?.chars().next()?;
                    if escaped == '\n' || escaped == '\r' {
                        // An escaped line break stands for nothing.
                        continue;
                    }
                    at += escaped.len_utf8()
                        + match escaped {
                            'x' => 2,
                            'u' => 4,
                            'U' => 8,
                            _ => 0,
                        };
                    break here;
                }
                '\'' if quote == Some(b'\'') => {
                    at += 1;
                    break here;
                }
                c if c == want => break here,
                _ => {}
            }
        };
        if i == index {
            return Some(found);
        }
    }
    (index == decoded.chars().count()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_read_as_field_paths() {
        assert_eq!(field_path(""), "");
        assert_eq!(field_path("/name"), "name");
        assert_eq!(
            field_path("/steps/2/retry/backoff"),
            "steps[2].retry.backoff"
        );
        assert_eq!(
            field_path("/steps/0/if_true/1/env/A~1B"),
            "steps[0].if_true[1].env.A/B"
        );
    }

    #[test]
    fn a_diagnostic_reads_file_line_column_field_message() {
        let d = Diagnostic {
            file: "workflows/deploy.awl.yaml".into(),
            position: Position { line: 7, column: 5 },
            field: "steps[1].comand".into(),
            message: "unknown field `comand`".into(),
        };
        assert_eq!(
            d.to_string(),
            "workflows/deploy.awl.yaml:7:5: steps[1].comand: unknown field `comand`"
        );
    }
}
