//! Where the log lives: a Postgres URL, or a SQLite file (the embedded default).

use std::fmt;
use std::path::{Path, PathBuf};

use super::StoreError;

/// The default place of the embedded store, relative to the working directory.
pub const DEFAULT_SQLITE_PATH: &str = ".awl/awl.db";

/// A parsed store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// `postgres://...` or `postgresql://...`
    Postgres(String),
    /// A SQLite database file (`sqlite://path` or `sqlite:path`).
    Sqlite(PathBuf),
}

impl StoreLocation {
    /// From `DATABASE_URL` if given, else the embedded default file.
    pub fn from_url_or_default(url: Option<&str>) -> Result<Self, StoreError> {
        match url.map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => Self::parse(url),
            None => Ok(Self::Sqlite(PathBuf::from(DEFAULT_SQLITE_PATH))),
        }
    }

    pub fn parse(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_string()));
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() || path == ":memory:" {
                return Err(StoreError::Config {
                    location: url.to_string(),
                    reason: "the embedded store needs a file path (an in-memory database would lose the log)".into(),
                });
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        Err(StoreError::Config {
            location: redact(url),
            reason: "expected a postgres://, postgresql:// or sqlite:// URL".into(),
        })
    }

    pub fn sqlite(path: impl AsRef<Path>) -> Self {
        Self::Sqlite(path.as_ref().to_path_buf())
    }

    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Postgres(url) => f.write_str(&redact(url)),
            Self::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
        }
    }
}

/// Hide a password in a URL before it is printed or logged.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_backends_and_defaults_to_sqlite() {
        assert_eq!(
            StoreLocation::from_url_or_default(None).unwrap(),
            StoreLocation::Sqlite(PathBuf::from(DEFAULT_SQLITE_PATH))
        );
        assert_eq!(
            StoreLocation::parse("sqlite:///tmp/x.db?mode=rwc").unwrap(),
            StoreLocation::Sqlite(PathBuf::from("/tmp/x.db"))
        );
        assert_eq!(
            StoreLocation::parse("sqlite:data/awl.db").unwrap(),
            StoreLocation::Sqlite(PathBuf::from("data/awl.db"))
        );
        assert!(matches!(
            StoreLocation::parse("postgres://u@h/db").unwrap(),
            StoreLocation::Postgres(_)
        ));
    }

    #[test]
    fn refuses_memory_and_unknown_schemes_without_leaking_passwords() {
        assert!(StoreLocation::parse("sqlite::memory:").is_err());
        let err = StoreLocation::parse("mysql://root:hunter2@db/x").unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("expected a postgres://"), "{text}");
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://awl:secret@db:5432/awl"),
            "postgres://awl:***@db:5432/awl"
        );
        assert_eq!(redact("postgres://awl@db/awl"), "postgres://awl@db/awl");
    }
}
