//! Whether a workflow fits what a caller is doing: the last tool calls of its session
//! begin the workflow's tool sequence, or a task's prompt and capabilities name its
//! tools. Pure: the service ranks what this scores.

use serde::{Deserialize, Serialize};

/// What the caller is doing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// The session's latest tool calls, oldest first.
    #[serde(default)]
    pub tools: Vec<String>,
    /// A task's prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A task's required capabilities.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl Context {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.prompt.as_deref().is_none_or(|p| p.trim().is_empty())
            && self.capabilities.is_empty()
    }
}

/// How well a workflow fits a context, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Match {
    /// From 0 (nothing in common) to 1.
    pub score: f64,
    pub why: String,
}

/// How `tools` (a workflow's tool sequence) fits `context`, if at all.
pub fn match_context(tools: &[String], context: &Context) -> Option<Match> {
    let by_calls = prefix_match(tools, &context.tools);
    let by_words = word_match(tools, context);
    match (by_calls, by_words) {
        (Some(a), Some(b)) => Some(if a.score >= b.score { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The longest run of the context's last calls that begins `tools`.
fn prefix_match(tools: &[String], calls: &[String]) -> Option<Match> {
    let longest = (1..=tools.len().min(calls.len()))
        .rev()
        .find(|&k| calls[calls.len() - k..] == tools[..k])?;
    let done = tools[..longest].join(", ");
    let why = if longest == tools.len() {
        format!("your last {longest} calls ({done}) are this whole sequence")
    } else {
        format!(
            "your last {} ({done}) begin this sequence; it goes on with {}",
            plural(longest, "call"),
            tools[longest..].join(", ")
        )
    };
    Some(Match {
        score: longest as f64 / tools.len() as f64,
        why,
    })
}

/// The share of `tools` that the prompt or the capabilities name.
fn word_match(tools: &[String], context: &Context) -> Option<Match> {
    let prompt = context.prompt.as_deref().unwrap_or("").to_lowercase();
    let words: Vec<String> = prompt
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .chain(context.capabilities.iter().map(|c| c.to_lowercase()))
        .collect();
    if words.is_empty() || tools.is_empty() {
        return None;
    }
    let named: Vec<&String> = tools
        .iter()
        .filter(|tool| {
            let tool = tool.to_lowercase();
            words
                .iter()
                .any(|w| *w == tool || w.strip_prefix("tool:") == Some(tool.as_str()))
        })
        .collect();
    if named.is_empty() {
        return None;
    }
    let mut distinct: Vec<&String> = named.clone();
    distinct.dedup();
    Some(Match {
        score: named.len() as f64 / tools.len() as f64,
        why: format!(
            "the task names {} of its {} tools ({})",
            named.len(),
            tools.len(),
            distinct
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
