//! `awl validate FILE...`: check workflow files and print every problem, each with its
//! file, line, column and field; `awl schema` prints the JSON Schema they are
//! checked against. Files may name the tools of the tool registry (`--tools-dir`):
//! the tools directory's and its MCP servers' (listed only when a file needs them).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::workflow::{self, Diagnostics};

use super::agents::Declarations;
use super::registry::WorkflowTools;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Workflow files (`*.awl.yaml`).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// One JSON object per problem (file, line, column, field, message).
    #[arg(long)]
    json: bool,
}

/// Returns whether every file is valid.
pub async fn run(args: ValidateArgs, declarations: &Declarations) -> anyhow::Result<bool> {
    let mut tools = WorkflowTools::load(declarations)?;
    let mut all = Diagnostics::default();
    for file in &args.files {
        let loaded = tools
            .check(|_| true, async |known| workflow::load_with(file, known))
            .await;
        match loaded {
            Ok(loaded) => {
                if !args.json {
                    let wf = loaded.workflow();
                    println!(
                        "{}: ok ({} {}, {} steps)",
                        file.display(),
                        wf.name,
                        wf.version,
                        wf.steps.len()
                    );
                }
            }
            Err(problems) => all.0.extend(problems.0),
        }
    }
    if args.json {
        for d in all.iter() {
            let line = serde_json::json!({
                "file": d.file.display().to_string(),
                "line": d.position.line,
                "column": d.position.column,
                "field": d.field,
                "message": d.message,
            });
            println!("{line}");
        }
    } else if !all.is_empty() {
        eprintln!("{all}");
        eprintln!(
            "{} problem{} found",
            all.len(),
            if all.len() == 1 { "" } else { "s" }
        );
    }
    Ok(all.is_empty())
}

pub fn print_schema() -> anyhow::Result<()> {
    use std::io::Write;
    std::io::stdout()
        .write_all(workflow::schema::workflow_schema_text().as_bytes())
        .context("writing to stdout")
}
