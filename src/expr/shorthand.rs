//! The `$`-shorthand of the older workflow dialect, translated to plain CEL.
//!
//! The seeds write references as `$inputs.repo`, `$steps.build.outputs.url`,
//! `$prev.output`, `$env.HOME` or `$build.status` (a bare step id). `$` is not
//! CEL, so before CEL sees an expression every `$` reference outside string
//! literals and comments is rewritten:
//!
//! | written                   | CEL                         |
//! |---------------------------|-----------------------------|
//! | `$inputs.repo`            | `inputs.repo`               |
//! | `$steps.build.status`     | `steps.build.status`        |
//! | `$steps.build-app.status` | `steps["build-app"].status` |
//! | `$prev.output`            | `prev.output`               |
//! | `$env.HOME`               | `env.HOME`                  |
//! | `$build-app.status`       | `steps["build-app"].status` |
//!
//! Step ids match `[A-Za-z_][A-Za-z0-9_-]*` (not ending in `-`): in `$build-app` the
//! `-` belongs to the id, so subtraction after a step reference needs spaces
//! (`$steps.a.outputs.n - 1`). Input and env names are plain identifiers, so
//! `$inputs.count-1` is `inputs.count - 1`. The four roots win over step ids: a
//! step called `env` is reached with `$steps.env`.
//!
//! The translation keeps a byte-by-byte map back to the text as written, so that
//! CEL's error positions are reported in the user's own source.

use super::ExprError;
use super::lexer::{CommentEnd, Lexer, Token, is_word_byte};

/// CEL text produced from a source, with the source offset of every byte.
#[derive(Debug, Clone)]
pub(super) struct Translated {
    pub(super) text: String,
    /// `origin[i]` is the offset in the source of byte `i` of `text`; one more
    /// entry maps the end of `text` to the end of the source.
    origin: Vec<usize>,
}

impl Translated {
    fn new(capacity: usize) -> Self {
        Translated {
            text: String::with_capacity(capacity),
            origin: Vec::with_capacity(capacity + 1),
        }
    }

    /// Copies `src[start..end]`, each byte mapped to where it was.
    fn copy(&mut self, src: &str, start: usize, end: usize) {
        if let Some(part) = src.get(start..end) {
            self.text.push_str(part);
            self.origin.extend(start..end);
        }
    }

    /// Adds text that was not written by the user, mapped to `at`.
    fn synth(&mut self, s: &str, at: usize) {
        self.text.push_str(s);
        self.origin.extend(std::iter::repeat_n(at, s.len()));
    }

    fn finish(mut self, source_len: usize) -> Self {
        self.origin.push(source_len);
        self
    }

    /// The source offset of byte `offset` of the CEL text.
    pub(super) fn source_offset(&self, offset: usize) -> usize {
        self.origin
            .get(offset)
            .or(self.origin.last())
            .copied()
            .unwrap_or(0)
    }

    /// The source offset of a CEL error position: a 1-based line and a 1-based
    /// column counted in characters.
    pub(super) fn source_offset_of_position(&self, line: isize, column: isize) -> usize {
        let mut offset = 0;
        let mut lines = self.text.split_inclusive('\n');
        for _ in 1..line.max(1) {
            match lines.next() {
                Some(l) => offset += l.len(),
                None => return self.source_offset(self.text.len()),
            }
        }
        let rest = self.text.get(offset..).unwrap_or_default();
        let skip = usize::try_from(column.max(1) - 1).unwrap_or(0);
        let within = rest.char_indices().nth(skip).map_or(rest.len(), |(i, _)| i);
        self.source_offset(offset + within)
    }
}

const ROOTS: [&str; 4] = ["inputs", "steps", "prev", "env"];

/// CEL's reserved words, which cannot follow a `.`: such a segment is written as an index.
const RESERVED: [&str; 21] = [
    "as",
    "break",
    "const",
    "continue",
    "else",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "namespace",
    "null",
    "package",
    "return",
    "true",
    "var",
    "void",
    "while",
];

/// Rewrites every `$` reference in a CEL expression.
pub(super) fn translate(src: &str) -> Result<Translated, ExprError> {
    let mut out = Translated::new(src.len() + 16);
    let mut lexer = Lexer::new(src, 0, CommentEnd::Newline);
    let mut copied = 0;
    while let Some(token) = lexer.next_token() {
        if let Token::Char { pos, ch: '$' } = token {
            if pos > 0 && is_word_byte(src.as_bytes()[pos - 1]) {
                return Err(bad_dollar(pos));
            }
            out.copy(src, copied, pos);
            let end = reference(src, pos, &mut out)?;
            lexer.pos = end;
            copied = end;
        }
    }
    out.copy(src, copied, src.len());
    Ok(out.finish(src.len()))
}

fn bad_dollar(pos: usize) -> ExprError {
    ExprError::new(
        pos,
        "unexpected '$': a reference is written $inputs.<name>, $steps.<id>, $prev, \
         $env.<NAME> or $<step-id>",
    )
}

/// Translates the reference whose `$` is at `dollar`; returns where it ends.
fn reference(src: &str, dollar: usize, out: &mut Translated) -> Result<usize, ExprError> {
    let start = dollar + 1;
    let end = name_end(src, start, true).ok_or_else(|| bad_dollar(dollar))?;
    let name = &src[start..end];
    if !ROOTS.contains(&name) {
        // A bare step id.
        out.synth("steps[\"", dollar);
        out.copy(src, start, end);
        out.synth("\"]", end);
        return Ok(end);
    }
    out.copy(src, start, end);
    if name == "prev" || src.as_bytes().get(end) != Some(&b'.') {
        return Ok(end);
    }
    let seg_start = end + 1;
    match name_end(src, seg_start, name == "steps") {
        Some(seg_end) => {
            segment(src, end, seg_end, out);
            Ok(seg_end)
        }
        None => Ok(end),
    }
}

/// Emits the segment `src[dot + 1..end]` after a `.` at `dot`: `.name` when that
/// is valid CEL, `["name"]` when the name has a `-` or is a reserved word.
fn segment(src: &str, dot: usize, end: usize, out: &mut Translated) {
    let name = &src[dot + 1..end];
    if name.contains('-') || RESERVED.contains(&name) {
        out.synth("[\"", dot);
        out.copy(src, dot + 1, end);
        out.synth("\"]", end);
    } else {
        out.copy(src, dot, end);
    }
}

/// The end of the name starting at `start`: `[A-Za-z_][A-Za-z0-9_]*`, with `-`
/// allowed inside (not at the end) when `dashes`.
fn name_end(src: &str, start: usize, dashes: bool) -> Option<usize> {
    let bytes = src.as_bytes();
    let first = *bytes.get(start)?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let mut end = start + 1;
    while end < bytes.len() && (is_word_byte(bytes[end]) || (dashes && bytes[end] == b'-')) {
        end += 1;
    }
    while bytes[end - 1] == b'-' {
        end -= 1;
    }
    Some(end)
}

/// A whole string that is one shorthand reference (`$build.outputs.url`,
/// `$inputs.items[0]`), translated; `None` if the string is anything else.
///
/// At least one `.` is required, so that text such as `$HOME` or `$5` stays text.
/// Every segment may contain `-` here: with nothing around the reference there is
/// no subtraction to confuse it with.
pub(super) fn whole_reference(src: &str) -> Option<Translated> {
    let bytes = src.as_bytes();
    if bytes.first() != Some(&b'$') {
        return None;
    }
    let end = name_end(src, 1, true)?;
    let name = &src[1..end];
    let mut out = Translated::new(src.len() + 16);
    if ROOTS.contains(&name) {
        out.copy(src, 1, end);
    } else {
        out.synth("steps[\"", 0);
        out.copy(src, 1, end);
        out.synth("\"]", end);
    }
    let mut pos = end;
    let mut dots = 0;
    while pos < bytes.len() {
        match bytes[pos] {
            b'.' => {
                let seg_end = name_end(src, pos + 1, true)?;
                segment(src, pos, seg_end, &mut out);
                pos = seg_end;
                dots += 1;
            }
            b'[' => {
                let digits = bytes[pos + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let close = pos + 1 + digits;
                if digits == 0 || bytes.get(close) != Some(&b']') {
                    return None;
                }
                out.copy(src, pos, close + 1);
                pos = close + 1;
            }
            _ => return None,
        }
    }
    (dots > 0).then(|| out.finish(src.len()))
}

#[cfg(test)]
mod tests;
