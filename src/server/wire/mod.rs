//! What REST and MCP take and give that is theirs alone: request bodies, query
//! parameters, and the answers no service returns as such. Requests refuse unknown
//! fields; every shape has a JSON Schema for the OpenAPI document and the MCP tool
//! list. Services' own read shapes (`board::views`, `projections::queries`) are
//! returned as they are.

mod agents;
mod board;
mod learning;
mod runs;
mod schedules;
mod tokens;

pub use agents::*;
pub use board::*;
pub use learning::*;
pub use runs::*;
pub use schedules::*;
pub use tokens::*;
