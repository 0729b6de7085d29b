//! What a call cost, from the tokens the server counted and a price per million.
//!
//! Budgets need a cost for every model call, and most servers say how many tokens a
//! call used but not what it cost. The table below holds the list prices of a few
//! common OpenAI models so that a workflow naming one of them needs no price of its
//! own; any other model (a local one, a gateway's) is priced by configuration, or
//! not at all. The table is a snapshot: prices change, so it is dated, and
//! configuration wins over it.
//!
//! Costs are computed at the standard rate: discounts for cached input, batch or
//! flex processing are not known here, so a cost is an upper bound.

use serde::{Deserialize, Serialize};

use super::Usage;

/// A model's price in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl Price {
    /// The cost in US dollars of a call that used `usage`.
    pub fn cost(&self, usage: Usage) -> f64 {
        self.cost_of(usage.prompt_tokens, usage.completion_tokens)
    }

    /// The cost in US dollars of `prompt_tokens` in and `completion_tokens` out.
    pub fn cost_of(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        // Token counts are far below 2^53, where f64 stops being exact.
        (prompt_tokens as f64 * self.input_per_million
            + completion_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// OpenAI's list prices (standard tier, USD per million tokens, input then output),
/// as published on <https://openai.com/api/pricing> in March 2026.
const TABLE: &[(&str, f64, f64)] = &[
    ("gpt-4o", 2.50, 10.00),
    // The first gpt-4o snapshot kept its launch price.
    ("gpt-4o-2024-05-13", 5.00, 15.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-5", 1.25, 10.00),
    ("gpt-5-mini", 0.25, 2.00),
    ("gpt-5-nano", 0.05, 0.40),
    ("o1", 15.00, 60.00),
    ("o1-mini", 1.10, 4.40),
    ("o1-pro", 150.00, 600.00),
    ("o3", 2.00, 8.00),
    ("o3-mini", 1.10, 4.40),
    ("o3-pro", 20.00, 80.00),
    ("o4-mini", 1.10, 4.40),
];

/// The list price of `model`: the table's entry of that name, else the longest
/// name in the table that `model` starts with (`gpt-4o-mini-2024-07-18` is priced
/// as `gpt-4o-mini`, not `gpt-4o`).
pub fn known_price(model: &str) -> Option<Price> {
    TABLE
        .iter()
        .filter(|(name, _, _)| model.starts_with(name))
        .max_by_key(|(name, _, _)| name.len())
        .map(|&(_, input, output)| Price {
            input_per_million: input,
            output_per_million: output,
        })
}
