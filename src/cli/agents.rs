//! `awl tools`, `awl agents` and `awl ask`: the tool registry, awl's own agents, and
//! asking one of them a question (plan, execute, solve), recorded as a solve.
//!
//! Tools come from the built-ins and the YAML files of `--tools-dir` (`AWL_TOOLS_DIR`,
//! else `./tools` when it exists), with the tools of the MCP servers those files
//! declare (started for the command); agents from `--agents-dir` (`AWL_AGENTS_DIR`, else
//! `./agents` when it exists).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::agents::{AgentDefinition, Agents, Observer, SolveResult, Unobserved, load_dir};
use crate::clock::system_clock;
use crate::domain::ids::{RunId, SolveId};
use crate::domain::solve::{Origin, SolveEvent};
use crate::store::EventStore;
use crate::tools::{CallContext, Registry};
use crate::vault::mask::NO_SECRETS;

use super::common::{actor, runners};

/// Where tools and agents are declared.
#[derive(Debug, Clone, Default, Args)]
pub struct Declarations {
    /// A directory of tools files (YAML `tools:` lists); default `./tools` if present.
    #[arg(long, env = "AWL_TOOLS_DIR", global = true)]
    pub tools_dir: Option<PathBuf>,
    /// A directory of agent definitions (one YAML file each); default `./agents` if
    /// present.
    #[arg(long, env = "AWL_AGENTS_DIR", global = true)]
    pub agents_dir: Option<PathBuf>,
}

impl Declarations {
    /// The registry: built-ins, and the tools directory's tools.
    pub fn registry(&self) -> anyhow::Result<Registry> {
        match chosen(&self.tools_dir, "tools") {
            Some(dir) => Registry::load(&dir, runners())
                .with_context(|| format!("loading tools from {}", dir.display())),
            None => Ok(Registry::builtins(runners())),
        }
    }

    /// The registry with the tools of the MCP servers the tools directory declares:
    /// each server started and its tools listed (a server that cannot be is an error
    /// naming it).
    pub async fn registry_with_mcp(&self) -> anyhow::Result<Registry> {
        let registry = self.registry()?;
        if registry.mcp_servers().is_empty() {
            return Ok(registry);
        }
        registry
            .discover()
            .await
            .context("discovering the tools of the MCP servers")
    }

    /// Every agent definition, checked against `registry`.
    pub fn definitions(&self, registry: &Registry) -> anyhow::Result<Vec<AgentDefinition>> {
        match chosen(&self.agents_dir, "agents") {
            Some(dir) => load_dir(&dir, registry)
                .map_err(|d| anyhow::anyhow!("{d}"))
                .with_context(|| format!("loading agents from {}", dir.display())),
            None => Ok(Vec::new()),
        }
    }

    /// The agents, recording in `store`, with the MCP servers' tools.
    pub async fn agents(&self, store: EventStore) -> anyhow::Result<Agents> {
        let registry = self.registry_with_mcp().await?;
        let definitions = self.definitions(&registry)?;
        Ok(Agents::new(store, definitions, registry, system_clock())?)
    }
}

fn chosen(given: &Option<PathBuf>, default: &str) -> Option<PathBuf> {
    given
        .clone()
        .or_else(|| Path::new(default).is_dir().then(|| PathBuf::from(default)))
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Every tool: built-in and declared.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One tool: its description, input schema, timeout, cost and source.
    Show { name: String },
    /// Call a tool with arguments given as a JSON object.
    Call {
        name: String,
        /// The arguments, a JSON object (`{"text": "a b c"}`).
        #[arg(long, default_value = "{}")]
        args: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every agent definition.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One agent definition, as checked.
    Show { name: String },
}

#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question or task.
    prompt: Option<String>,
    /// The agent to ask.
    #[arg(long)]
    agent: Option<String>,
    /// Carry on a solve that stopped (its process died) instead of asking anew.
    #[arg(long, value_name = "SOLVE_ID", conflicts_with_all = ["prompt", "agent"])]
    resume: Option<SolveId>,
    /// Print each phase, and the reply's text as it streams, while the agent works.
    #[arg(long)]
    stream: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Who asks (recorded; default: $USER).
    #[arg(long)]
    by: Option<String>,
}

pub async fn tools(decl: &Declarations, command: ToolsCommand) -> anyhow::Result<()> {
    let registry = decl.registry_with_mcp().await?;
    match command {
        ToolsCommand::List { json } => {
            if json {
                let list: Vec<_> = registry.list().collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            for tool in registry.list() {
                println!(
                    "{:<24} {:<12} {}",
                    tool.name,
                    crate::server::wire::source(&tool.source),
                    tool.description
                );
            }
            Ok(())
        }
        ToolsCommand::Show { name } => {
            let tool = registry.get(&name).with_context(|| {
                format!("no tool `{name}` (tools: {})", registry.names().join(", "))
            })?;
            println!("{}", serde_json::to_string_pretty(tool)?);
            Ok(())
        }
        ToolsCommand::Call { name, args } => {
            let arguments: Value = serde_json::from_str(&args)
                .with_context(|| format!("--args is not JSON: {args}"))?;
            let key = format!("cli:{}", SolveId::new());
            let ctx = CallContext {
                run_id: RunId::new(),
                call_key: &key,
                mask: &NO_SECRETS,
            };
            match registry.call(&name, &arguments, ctx).await {
                Ok(success) => {
                    println!("{}", serde_json::to_string_pretty(&success.output)?);
                    Ok(())
                }
                Err(failure) => bail!("tool `{name}` failed: {failure}"),
            }
        }
    }
}

pub async fn agents(decl: &Declarations, command: AgentsCommand) -> anyhow::Result<()> {
    let registry = decl.registry_with_mcp().await?;
    let definitions = decl.definitions(&registry)?;
    match command {
        AgentsCommand::List { json } => {
            if json {
                println!("{}", serde_json::to_string_pretty(&definitions)?);
                return Ok(());
            }
            if definitions.is_empty() {
                println!("no agents (give --agents-dir, or put definitions in ./agents)");
            }
            for agent in &definitions {
                println!(
                    "{:<20} {:<24} tools: {}  capabilities: {}",
                    agent.name(),
                    agent.file.model.name,
                    agent.file.tools.join(", "),
                    agent.file.capabilities.join(", ")
                );
            }
            Ok(())
        }
        AgentsCommand::Show { name } => {
            let agent = definitions
                .iter()
                .find(|a| a.name() == name)
                .with_context(|| format!("no agent `{name}`"))?;
            println!("{}", serde_json::to_string_pretty(agent)?);
            Ok(())
        }
    }
}

pub async fn ask(store: EventStore, decl: &Declarations, args: AskArgs) -> anyhow::Result<()> {
    let agents = decl.agents(store).await?;
    let by = actor(&args.by);
    let mut printer = Printer;
    let observer: &mut (dyn Observer + Send) = if args.stream && !args.json {
        &mut printer
    } else {
        &mut Unobserved
    };
    let result = match (args.resume, args.prompt, args.agent) {
        (Some(id), _, _) => agents.resume(id, &by, observer).await?,
        (None, Some(prompt), Some(agent)) => {
            agents
                .ask(
                    SolveId::new(),
                    &agent,
                    &prompt,
                    Origin::default(),
                    &by,
                    observer,
                )
                .await?
        }
        (None, None, _) => bail!("give a prompt: awl ask \"...\" --agent NAME"),
        (None, Some(_), None) => bail!("name the agent to ask: --agent NAME"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_result(&result);
    }
    if result.finished() {
        Ok(())
    } else {
        Err(super::Invalid.into())
    }
}

fn print_result(result: &SolveResult) {
    for step in &result.plan {
        let how = if step.ok { "ok" } else { "failed" };
        println!(
            "  [{}] {} {} ({how})",
            step.iteration, step.tool, step.arguments
        );
    }
    match (&result.message, &result.error) {
        (Some(message), _) => println!("{message}"),
        (None, Some(error)) => eprintln!("awl: the solve failed: {error}"),
        _ => {}
    }
    eprintln!(
        "solve {} ({}): {} model calls, {} tokens in, {} out, {:.6} USD; plan {} ms, execute {} ms, solve {} ms, total {} ms",
        result.solve_id,
        result.agent,
        result.model_calls,
        result.tokens_in,
        result.tokens_out,
        result.cost_usd,
        result.plan_ms,
        result.execute_ms,
        result.solve_ms,
        result.total_ms
    );
}

/// Prints phases to stderr and streamed text to stdout as they come.
struct Printer;

impl Observer for Printer {
    fn event(&mut self, event: &SolveEvent) {
        let line = match event {
            SolveEvent::Started { setup, .. } => {
                json!({"phase": "started", "agent": setup.agent, "model": setup.model})
            }
            SolveEvent::ModelReplied { reply, .. } => json!({
                "phase": reply.phase.as_str(), "iteration": reply.iteration,
                "tool_calls": reply.tool_calls.iter().map(|c| &c.tool).collect::<Vec<_>>(),
                "latency_ms": reply.latency_ms,
            }),
            SolveEvent::ToolFinished { result, .. } => json!({
                "phase": "execute", "tool": result.tool, "ok": result.outcome.is_ok(),
                "duration_ms": result.duration_ms,
            }),
            SolveEvent::Finished { .. } => json!({"phase": "finished"}),
            SolveEvent::Failed { reason, .. } => json!({"phase": "failed", "reason": reason}),
        };
        eprintln!("{line}");
    }

    fn token(&mut self, text: &str) {
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
}
