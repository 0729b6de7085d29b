//! Where an agent works and where a task must be done: metadata only.
//!
//! The server never touches an agent's file system; it stores the repository and
//! branch an agent reports, and prefers handing a task to an agent already there.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// A repository (`org/app`) and optionally a branch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workspace {
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl Workspace {
    pub fn repository(repository: impl Into<String>) -> Self {
        Self {
            repository: repository.into(),
            branch: None,
        }
    }

    /// Same repository (branches may differ: an agent can switch branch cheaply).
    pub fn same_repository(&self, other: &Workspace) -> bool {
        self.repository == other.repository
    }
}

/// A set of capability names, normalised (trimmed, lower-case, sorted, no duplicates,
/// no empty names) so that two sets compare equal whatever order they were given in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<String>", into = "Vec<String>")]
pub struct Capabilities(BTreeSet<String>);

impl Capabilities {
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self(
            names
                .into_iter()
                .map(|n| n.as_ref().trim().to_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        )
    }

    /// True when every capability in `required` is in `self`.
    pub fn covers(&self, required: &Capabilities) -> bool {
        required.0.is_subset(&self.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl From<Vec<String>> for Capabilities {
    fn from(names: Vec<String>) -> Self {
        Self::new(names)
    }
}

impl From<Capabilities> for Vec<String> {
    fn from(caps: Capabilities) -> Self {
        caps.0.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_normalised_and_cover_subsets() {
        let agent = Capabilities::new([" Rust", "python", "rust", ""]);
        assert_eq!(Vec::<String>::from(agent.clone()), vec!["python", "rust"]);
        assert!(agent.covers(&Capabilities::new(["RUST"])));
        assert!(agent.covers(&Capabilities::default()));
        assert!(!agent.covers(&Capabilities::new(["rust", "go"])));
    }
}
