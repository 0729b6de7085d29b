//! Pages of a listing: the one cursor format every listing gives and takes.
//!
//! Listings are keyset-paginated: rows are ordered by a number (a time in microseconds,
//! or a log position) and then an id, and a page's `next` is the [`Cursor`] of its last
//! row. The client passes it back as `after` and gets the rows strictly past it, so a
//! row written between two pages is neither skipped nor shown twice. The text form is
//! `<number>.<id>` (`<number>` alone when the order has no id), the same for the
//! board, runs, audit and every other listing.

use schemars::JsonSchema;

use crate::error::{Classified, ErrorKind};
use serde::{Deserialize, Serialize};

/// Where a page ended: the sort key and the id of its last row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub key: i64,
    pub id: String,
}

/// A cursor this server did not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`after` {0:?} is not a cursor this server gave")]
pub struct BadCursor(pub String);

impl Classified for BadCursor {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Invalid
    }

    fn code(&self) -> &'static str {
        "invalid_request"
    }
}

impl Cursor {
    pub fn new(key: i64, id: impl Into<String>) -> Self {
        Self { key, id: id.into() }
    }

    /// The cursor of a listing ordered by a number alone (a log position).
    pub fn at(key: i64) -> Self {
        Self::new(key, "")
    }

    /// Parse the `after` a client sent back.
    pub fn parse(text: &str) -> Result<Self, BadCursor> {
        let (key, id) = text.split_once('.').unwrap_or((text, ""));
        let key = key.parse().map_err(|_| BadCursor(text.to_string()))?;
        Ok(Self::new(key, id))
    }

    /// Parse an optional `after`.
    pub fn parse_opt(text: Option<&str>) -> Result<Option<Self>, BadCursor> {
        text.map(Self::parse).transpose()
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.id.is_empty() {
            write!(f, "{}", self.key)
        } else {
            write!(f, "{}.{}", self.key, self.id)
        }
    }
}

/// A page of rows; pass `next` as `after` for the following page.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Page<T> {
    pub rows: Vec<T>,
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// Cut `rows` (fetched with one row more than `limit`) to a page: `next` is the
    /// cursor of the last row kept when there were more.
    pub fn cut(mut rows: Vec<T>, limit: usize, cursor: impl Fn(&T) -> Cursor) -> Self {
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|r| cursor(r).to_string())
        } else {
            None
        };
        Self { rows, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote() {
        for c in [
            Cursor::new(1_700_000_000_000_000, "0198-abc"),
            Cursor::at(42),
            Cursor::new(-5, "a.b"),
        ] {
            assert_eq!(Cursor::parse(&c.to_string()), Ok(c));
        }
        assert!(Cursor::parse("soon.x").is_err());
        assert!(Cursor::parse("").is_err());
    }

    #[test]
    fn a_page_cut_names_its_last_row_only_when_more_follow() {
        let page = Page::cut(vec![1, 2, 3], 2, |n| Cursor::at(*n));
        assert_eq!((page.rows, page.next), (vec![1, 2], Some("2".to_string())));
        let page = Page::cut(vec![1, 2], 2, |n| Cursor::at(*n));
        assert_eq!((page.rows, page.next), (vec![1, 2], None));
    }
}
