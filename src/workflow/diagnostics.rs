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

    /// A problem `offset` bytes into the string at `pointer` (an expression error).
    /// Exact for a string on one line, plain or quoted; for a block scalar, the line
    /// after its indicator.
    pub fn at_offset(
        &mut self,
        pointer: &str,
        text: &str,
        offset: usize,
        message: impl Into<String>,
    ) {
        let start = self.map.value(pointer);
        let line = self
            .source
            .lines()
            .nth(start.line.saturating_sub(1) as usize)
            .unwrap_or_default();
        let first = line.chars().nth(start.column.saturating_sub(1) as usize);
        let before = text.get(..offset).unwrap_or(text);
        let position = match first {
            Some('|') | Some('>') => Position {
                line: start.line + 1 + before.matches('\n').count() as u64,
                column: 1,
            },
            _ if before.contains('\n') => start,
            Some('"') | Some('\'') => Position {
                line: start.line,
                column: start.column + 1 + before.chars().count() as u64,
            },
            _ => Position {
                line: start.line,
                column: start.column + before.chars().count() as u64,
            },
        };
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
