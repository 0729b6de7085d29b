//! What the engine asks of a definition on every tick, worked out once per loaded
//! definition and kept with it: every step's id (the walk binds them all for a
//! template that reads `steps` as a whole), which of them are the run's hooks
//! (`on_success`, `on_failure`), and what each step's templates refer to (so a step
//! that starts is rendered against a view of only the steps it names).
//!
//! The engine used to collect the ids on every tick and serialise each starting step
//! to JSON to parse its templates again; a ten-step run did that ten times per step.
//!
//! The index is computed the first time it is asked for ([`Workflow::index`]) and
//! kept in the definition (a child of `model` for that reason: the model holds it), which is not changed after it is loaded: the same
//! definition (an `Arc` in the executor's cache) serves every run of its version.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use crate::expr::References;

use super::{Step, Workflow};

/// The ids, hooks and template references of one definition's steps.
#[derive(Debug, Default)]
pub struct StepIndex {
    ids: Vec<String>,
    hooks: BTreeSet<String>,
    references: HashMap<String, References>,
}

impl StepIndex {
    /// Every step of `workflow`, nested ones included, in document order: the
    /// steps, then `on_success`, then `on_failure`.
    pub fn of(workflow: &Workflow) -> Self {
        let mut index = Self::default();
        for step in &workflow.steps {
            index.add(step, false);
        }
        for step in workflow.on_success.iter().chain(&workflow.on_failure) {
            index.add(step, true);
        }
        index
    }

    fn add(&mut self, step: &Step, hook: bool) {
        let id = step.id().to_string();
        self.references
            .entry(id.clone())
            .or_insert_with(|| references_of(step));
        if hook {
            self.hooks.insert(id.clone());
        }
        self.ids.push(id);
        for child in step.children() {
            self.add(child, hook);
        }
    }

    /// Every step's id, in document order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Whether `id` is a step of `on_success` or `on_failure` (or nested in one).
    pub fn is_hook(&self, id: &str) -> bool {
        self.hooks.contains(id)
    }

    /// What the templates of step `id` refer to (its nested steps' included), or
    /// `None` for a step this definition does not have.
    pub fn references(&self, id: &str) -> Option<&References> {
        self.references.get(id)
    }
}

/// What the template-bearing fields of `step` refer to: every string of its kind,
/// serialised as JSON, parsed as a template.
pub fn references_of(step: &Step) -> References {
    let templates = serde_json::to_value(&step.kind).unwrap_or(serde_json::Value::Null);
    crate::expr::references_in(&templates)
}

/// A definition's [`StepIndex`], filled on first use. Not part of the language: it is
/// never serialised, not in the schema, and two definitions compare equal whatever
/// their indexes hold.
#[derive(Debug, Clone, Default)]
pub struct IndexCell(OnceLock<Arc<StepIndex>>);

impl IndexCell {
    pub(crate) fn get_or_init(&self, workflow: &Workflow) -> &StepIndex {
        self.0.get_or_init(|| Arc::new(StepIndex::of(workflow)))
    }
}

impl PartialEq for IndexCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::workflow::validate::check;

    fn workflow(source: &str) -> Workflow {
        match check(Path::new("wf.awl.yaml"), source) {
            Ok(checked) => checked.workflow,
            Err(d) => panic!("{d}"),
        }
    }

    const FILE: &str = r#"
name: indexed
version: "1.0.0"
inputs:
  who: {type: string, default: x}
steps:
  - id: build
    type: shell
    command: [echo, "${{ inputs.who }}"]
  - id: fan
    type: parallel
    branches:
      - name: a
        steps: [{id: a1, tool: echo, inputs: {message: "${{ steps.build.outputs.stdout }}"}}]
  - id: all
    tool: echo
    inputs: {message: "${{ size(steps) }}"}
  - id: last
    tool: echo
    inputs: {message: "${{ prev.outputs }}"}
on_failure:
  - id: tell
    tool: echo
    inputs: {message: "${{ steps.fan.status }}"}
"#;

    #[test]
    fn ids_in_document_order_with_nested_steps_and_hooks_last() {
        let wf = workflow(FILE);
        assert_eq!(
            wf.index().ids(),
            ["build", "fan", "a1", "all", "last", "tell"]
        );
        assert!(wf.index().is_hook("tell"));
        assert!(!wf.index().is_hook("build"));
        assert!(!wf.index().is_hook("a1"));
    }

    #[test]
    fn references_are_the_steps_templates_nested_ones_included() {
        let wf = workflow(FILE);
        let index = wf.index();
        let refs = |id: &str| index.references(id).cloned().unwrap_or_default();
        assert!(refs("build").inputs.contains("who"));
        assert!(refs("build").steps.is_empty());
        assert!(refs("a1").steps.contains("build"));
        // A parallel step's templates are its branches'.
        assert!(refs("fan").steps.contains("build"));
        assert!(refs("all").any_step);
        assert!(refs("last").prev && !refs("last").any_step);
        assert!(refs("tell").steps.contains("fan"));
        assert!(index.references("nope").is_none());
    }

    #[test]
    fn the_index_is_not_part_of_the_language() {
        let wf = workflow(FILE);
        let fresh = wf.clone();
        let _ = wf.index();
        assert_eq!(wf, fresh, "a filled index does not make definitions differ");
        let json = serde_json::to_value(&wf).expect("a definition is written as JSON");
        assert_eq!(json["name"], "indexed");
        assert!(json.get("index").is_none(), "{json}");
        let schema = serde_json::to_value(schemars::schema_for!(Workflow)).expect("the schema");
        assert!(schema["properties"]["steps"].is_object(), "{schema}");
        assert!(schema["properties"].get("index").is_none());
    }
}
