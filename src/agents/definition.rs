//! Agent definitions: YAML files (`agents/*.yaml`), one agent each, checked like a
//! workflow file (every problem at its line and column) and against the tool
//! registry (every tool it may use exists).
//!
//! ```yaml
//! name: researcher
//! description: Answers questions about texts.
//! capabilities: [research]
//! model:
//!   name: gpt-4o-mini
//!   base_url: https://api.openai.com/v1
//!   api_key_env: OPENAI_API_KEY     # the key is read from this variable
//!   price: {input_per_million: 0.15, output_per_million: 0.60}
//! system_prompt: Answer briefly; use the tools to count.
//! tools: [word_count, echo]
//! budget_usd: 0.05                  # per solve; needs a price
//! max_iterations: 4
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::models::{Endpoint, Price, known_price};
use crate::tools::Registry;
use crate::workflow::{Diagnostic, Diagnostics, FileSchema, check_file, problem_at};

/// How many plan phases an agent gets when its file does not say.
pub const DEFAULT_ITERATIONS: u32 = 5;

/// An agent definition file, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// The agent's name, as `awl ask --agent` and the board know it.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What it can do: board tasks and `agent` steps needing these may be given to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    pub model: ModelSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The tools of the registry it may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// What one solve may spend on model and tool calls, in USD (needs the model's
    /// price, given here or known to awl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub budget_usd: Option<f64>,
    /// Plan phases (model calls offered the tools) at most; then one answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_iterations: Option<u32>,
    /// Take tasks from the board (`awl serve` registers the agent, with its
    /// capabilities, and works the tasks it may take: those whose `runner` is
    /// `builtin` or `any`).
    #[serde(default)]
    pub board: bool,
    /// Board tasks worked at once (4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub concurrency: Option<u32>,
}

/// The model an agent uses, over the OpenAI-compatible Chat Completions API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model's name, as the server knows it.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The API's base URL (`…/v1`): requests go to `{base_url}/chat/completions`.
    #[schemars(regex(pattern = r"^https?://"))]
    pub base_url: String,
    /// The environment variable holding the API key (sent as a bearer token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// USD per million tokens; without it awl's table of known models is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceSpec>,
    /// One HTTP attempt's limit (120 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Option<u64>,
    /// Attempts after the first on 429, 5xx and network errors (3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 10))]
    pub max_retries: Option<u32>,
    /// The longest reply, in tokens (also what a budget check counts on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Stream replies (tokens reach `awl ask --stream` and SSE as they come).
    #[serde(default)]
    pub stream: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    #[schemars(range(min = 0.0))]
    pub input_per_million: f64,
    #[schemars(range(min = 0.0))]
    pub output_per_million: f64,
}

/// A checked agent definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDefinition {
    #[serde(flatten)]
    pub file: AgentFile,
    pub path: PathBuf,
    /// The price used for costs: the file's, or the table's.
    pub price: Option<Price>,
}

impl AgentDefinition {
    pub fn name(&self) -> &str {
        &self.file.name
    }

    pub fn max_iterations(&self) -> u32 {
        self.file.max_iterations.unwrap_or(DEFAULT_ITERATIONS)
    }

    /// Board tasks worked at once.
    pub fn concurrency(&self) -> u32 {
        self.file.concurrency.unwrap_or(4)
    }

    /// How long a solve of this agent may go without a recorded event while its runner
    /// lives: twice the longest one step can take (a model call with all its retries
    /// and waits between them, or its slowest tool of `registry`). A solve idle for
    /// longer has lost its runner, and another process may carry it on.
    pub fn abandoned_after(&self, registry: &Registry) -> Duration {
        let e = self.endpoint();
        let model = e.timeout * (e.max_retries + 1) + e.max_retry_wait * e.max_retries;
        let tools = self
            .file
            .tools
            .iter()
            .filter_map(|t| registry.get(t))
            .map(|t| t.timeout)
            .max()
            .unwrap_or_default();
        model.max(tools) * 2
    }

    /// Where its model is, with the key read from the environment now.
    pub fn endpoint(&self) -> Endpoint {
        let spec = &self.file.model;
        let mut endpoint = Endpoint::new(spec.base_url.trim_end_matches('/'));
        endpoint.api_key = spec
            .api_key_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok());
        if let Some(s) = spec.timeout_seconds {
            endpoint.timeout = Duration::from_secs(s);
        }
        if let Some(r) = spec.max_retries {
            endpoint.max_retries = r;
        }
        endpoint
    }
}

fn schema() -> &'static FileSchema {
    static SCHEMA: OnceLock<FileSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let generator = schemars::generate::SchemaGenerator::new(
            schemars::generate::SchemaSettings::draft2020_12(),
        );
        FileSchema::new(generator.into_root_schema_for::<AgentFile>().to_value())
    })
}

/// Check one agent file against the schema and the registry.
pub fn check(
    path: &Path,
    source: &str,
    registry: &Registry,
) -> Result<AgentDefinition, Diagnostics> {
    let (file, _json, map) = check_file::<AgentFile>(path, source, schema())?;
    let mut problems = Vec::new();
    for (i, tool) in file.tools.iter().enumerate() {
        if registry.get(tool).is_none() {
            problems.push(problem_at(
                path,
                source,
                &map,
                &format!("/tools/{i}"),
                format!(
                    "unknown tool `{tool}` (the registry has: {})",
                    registry.names().join(", ")
                ),
            ));
        }
    }
    let price = file
        .model
        .price
        .map(|p| Price {
            input_per_million: p.input_per_million,
            output_per_million: p.output_per_million,
        })
        .or_else(|| known_price(&file.model.name));
    if file.budget_usd.is_some() && price.is_none() {
        problems.push(problem_at(
            path,
            source,
            &map,
            "/budget_usd",
            format!(
                "a budget needs the price of model `{}`: give `model.price`",
                file.model.name
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(Diagnostics(problems));
    }
    Ok(AgentDefinition {
        file,
        path: path.to_path_buf(),
        price,
    })
}

/// Read and check every `*.yaml` / `*.yml` file of `dir`: every problem of every file
/// at once; two files naming the same agent is a problem at the second.
pub fn load_dir(dir: &Path, registry: &Registry) -> Result<Vec<AgentDefinition>, Diagnostics> {
    let files = crate::workflow::yaml_files_in(dir).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: dir.to_path_buf(),
            position: Default::default(),
            field: String::new(),
            message: format!("cannot read the agents directory: {e}"),
        }])
    })?;
    let mut problems = Vec::new();
    let mut agents: Vec<AgentDefinition> = Vec::new();
    for path in files {
        let source = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) => {
                problems.push(Diagnostic {
                    file: path.clone(),
                    position: Default::default(),
                    field: String::new(),
                    message: format!("cannot read the file: {e}"),
                });
                continue;
            }
        };
        match check(&path, &source, registry) {
            Ok(agent) => {
                if let Some(first) = agents.iter().find(|a| a.name() == agent.name()) {
                    problems.push(Diagnostic {
                        file: path.clone(),
                        position: Default::default(),
                        field: "name".into(),
                        message: format!(
                            "agent `{}` is already defined in {}",
                            agent.name(),
                            first.path.display()
                        ),
                    });
                } else {
                    agents.push(agent);
                }
            }
            Err(found) => problems.extend(found.0),
        }
    }
    if problems.is_empty() {
        Ok(agents)
    } else {
        Err(Diagnostics(problems))
    }
}
