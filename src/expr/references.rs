//! What an expression refers to, read off CEL's syntax tree.
//!
//! Validation of a workflow file wants to say "`steps.deploy` names no step" or
//! "`inputs.nme` is not a declared input" before anything runs. That needs the
//! names an expression uses, which the parsed tree gives exactly: a field
//! selection (`steps.deploy`) or an index with a string literal
//! (`steps["build-app"]`) whose operand is one of the four variables. Dynamic
//! access (`inputs[name]`) names nothing in particular and records nothing.
//! Comprehension variables shadow: in `[1].map(inputs, inputs + 1)` the inner
//! `inputs` is the loop variable.
//!
//! The same walk finds identifiers that are none of the variables, so that a
//! typo such as `input.repo` is an error when the file is loaded rather than when
//! the step runs.

use std::collections::BTreeSet;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

/// The names an expression uses under `inputs`, `steps` and `env`, and whether it
/// uses `prev`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    pub inputs: BTreeSet<String>,
    pub steps: BTreeSet<String>,
    pub prev: bool,
    pub env: BTreeSet<String>,
    /// `steps` is read other than by a literal name: a computed key
    /// (`steps[inputs.which]`), `size(steps)`, `'build' in steps`, a loop over it.
    /// Which steps such an expression needs cannot be told from its text: a caller
    /// that binds only the named steps must bind them all.
    pub any_step: bool,
}

impl References {
    /// Adds everything `other` refers to.
    pub fn merge(&mut self, other: &References) {
        self.inputs.extend(other.inputs.iter().cloned());
        self.steps.extend(other.steps.iter().cloned());
        self.env.extend(other.env.iter().cloned());
        self.prev |= other.prev;
        self.any_step |= other.any_step;
    }

    /// Nothing referred to by name, no `prev`, and `steps` not read as a whole.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
            && self.steps.is_empty()
            && self.env.is_empty()
            && !self.prev
            && !self.any_step
    }
}

/// Which of the four variables appear at all, named or not: only those are bound
/// when the expression is evaluated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Roots {
    pub(super) inputs: bool,
    pub(super) steps: bool,
    pub(super) prev: bool,
    pub(super) env: bool,
}

/// Identifiers CEL resolves without a variable: the type names.
const TYPE_NAMES: [&str; 14] = [
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "optional_type",
    "string",
    "timestamp",
    "type",
    "uint",
];

#[derive(Debug, Default)]
pub(super) struct Analysis {
    pub(super) references: References,
    pub(super) roots: Roots,
    /// The first identifier that is neither a variable, a loop variable nor a
    /// type name: its node id and name.
    pub(super) unknown: Option<(u64, String)>,
}

pub(super) fn analyze(expr: &IdedExpr) -> Analysis {
    let mut analysis = Analysis::default();
    analysis.walk(expr, &mut Vec::new());
    analysis
}

impl Analysis {
    fn walk(&mut self, e: &IdedExpr, bound: &mut Vec<String>) {
        match &e.expr {
            Expr::Ident(name) => self.ident(e.id, name, bound),
            Expr::Select(select) => match free_root(&select.operand, bound) {
                Some(root) => self.record(root, &select.field),
                None => self.walk(&select.operand, bound),
            },
            Expr::Call(call) => {
                let indexing = [
                    operators::INDEX,
                    operators::OPT_INDEX,
                    operators::OPT_SELECT,
                ]
                .contains(&call.func_name.as_str());
                if indexing
                    && call.target.is_none()
                    && let [operand, key] = call.args.as_slice()
                    && let Some(root) = free_root(operand, bound)
                    && let Expr::Literal(LiteralValue::String(key)) = &key.expr
                {
                    self.record(root, key.inner());
                    return;
                }
                if let Some(target) = &call.target {
                    match &target.expr {
                        // `math.greatest(..)`: a namespace, not a variable.
                        Expr::Ident(name) if !is_root(name) || bound.contains(name) => {}
                        _ => self.walk(target, bound),
                    }
                }
                for arg in &call.args {
                    self.walk(arg, bound);
                }
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element, bound);
                }
            }
            Expr::Map(map) => self.entries(map.entries.iter().map(|e| &e.expr), bound),
            Expr::Struct(s) => self.entries(s.entries.iter().map(|e| &e.expr), bound),
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, bound);
                self.walk(&c.accu_init, bound);
                let depth = bound.len();
                bound.push(c.iter_var.clone());
                bound.extend(c.iter_var2.iter().cloned());
                bound.push(c.accu_var.clone());
                self.walk(&c.loop_cond, bound);
                self.walk(&c.loop_step, bound);
                self.walk(&c.result, bound);
                bound.truncate(depth);
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entries<'e>(
        &mut self,
        entries: impl Iterator<Item = &'e EntryExpr>,
        bound: &mut Vec<String>,
    ) {
        for entry in entries {
            match entry {
                EntryExpr::MapEntry(m) => {
                    self.walk(&m.key, bound);
                    self.walk(&m.value, bound);
                }
                EntryExpr::StructField(f) => self.walk(&f.value, bound),
            }
        }
    }

    fn ident(&mut self, id: u64, name: &str, bound: &[String]) {
        if bound.iter().any(|b| b == name) {
            return;
        }
        match name {
            "inputs" => self.roots.inputs = true,
            // Reached here, `steps` is not read by a literal name (see `record`).
            "steps" => {
                self.roots.steps = true;
                self.references.any_step = true;
            }
            "env" => self.roots.env = true,
            "prev" => {
                self.roots.prev = true;
                self.references.prev = true;
            }
            _ if TYPE_NAMES.contains(&name) => {}
            _ => {
                if self.unknown.is_none() {
                    self.unknown = Some((id, name.to_owned()));
                }
            }
        }
    }

    /// `root.name` or `root["name"]`, `root` being one of the four variables.
    fn record(&mut self, root: &str, name: &str) {
        let set = match root {
            "inputs" => {
                self.roots.inputs = true;
                &mut self.references.inputs
            }
            "steps" => {
                self.roots.steps = true;
                &mut self.references.steps
            }
            "env" => {
                self.roots.env = true;
                &mut self.references.env
            }
            _ => {
                // `prev.output`: `prev` is one step, its fields are not names.
                self.roots.prev = true;
                self.references.prev = true;
                return;
            }
        };
        set.insert(name.to_owned());
    }
}

fn is_root(name: &str) -> bool {
    matches!(name, "inputs" | "steps" | "prev" | "env")
}

/// The variable `e` is, if it is one of the four and not shadowed.
fn free_root<'e>(e: &'e IdedExpr, bound: &[String]) -> Option<&'e str> {
    match &e.expr {
        Expr::Ident(name) if is_root(name) && !bound.iter().any(|b| b == name) => {
            Some(name.as_str())
        }
        _ => None,
    }
}
