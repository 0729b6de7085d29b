//! The learning loop as a service: proposals from mined patterns, a person's decision
//! on them, and suggestions for a context.
//!
//! The `learning` projection mines tool calls as they arrive (`tool_patterns`); the
//! learner reads the patterns strong enough to propose (support and confidence over
//! the configured thresholds, the longest of overlapping ones), leaves out sequences a
//! user-submitted workflow already does (those take priority), generates a workflow
//! file (`generate`), checks it as `awl validate` would, and proposes it on the
//! workflow's stream under an id derived from scope, sequence and file, so learners on
//! several servers propose it once. A newer file for the same sequence supersedes the
//! open proposal. Only a person approves (the interfaces check the role; the domain
//! registers the version in the same decision); the approved workflow runs and replays
//! like any other.
//!
//! Isolation: every pattern, proposal and learned workflow has a scope (`team:NAME` or
//! `user:NAME`, from the token that reported the calls). A caller sees its own scope's,
//! plus learned workflows approved as shared and every user-submitted workflow; an
//! admin sees every scope.

mod generate;
#[cfg(test)]
mod tests;

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::definitions::{self, DefinitionError};
use crate::domain::Decide;
use crate::domain::ids::{ProposalId, WorkflowName};
use crate::domain::learning::{Context, Pattern, closed, match_context};
use crate::domain::workflow::{
    ContentHash, Evidence, Version, WorkflowCommand, WorkflowDefinition,
};
use crate::error::{Classified, ErrorKind};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::command::Command;
use crate::store::rows::Param;
use crate::store::{EventStore, StoreError};

pub use generate::to_yaml;

/// What can go wrong in the learning service.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    #[error("no proposal {0} that you can see")]
    UnknownProposal(String),
    #[error("proposal {id} is {status}: only an OPEN proposal can be {action}")]
    Decided {
        id: String,
        status: String,
        action: &'static str,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("the learned workflow {workflow} failed its own validation: {problems}")]
    Generated { workflow: String, problems: String },
}

impl Classified for LearnError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Store(e) => e.kind(),
            Self::Definition(e) => e.kind(),
            Self::UnknownProposal(_) => ErrorKind::NotFound,
            Self::Decided { .. } => ErrorKind::Conflict,
            Self::Invalid(_) => ErrorKind::Invalid,
            Self::Generated { .. } => ErrorKind::Internal,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Store(e) => e.code(),
            Self::Definition(e) => e.code(),
            Self::UnknownProposal(_) => "proposal_not_found",
            Self::Decided { .. } => "proposal_decided",
            Self::Invalid(_) => "invalid_request",
            Self::Generated { .. } => "learned_workflow_invalid",
        }
    }
}

/// Thresholds of the learner.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnConfig {
    /// Successful executions a sequence needs before it is proposed (3).
    pub min_successes: u64,
    /// Successes over executions a sequence needs before it is proposed (0.8).
    pub min_confidence: f64,
    /// The confidence a suggestion needs unless the caller says (0.8).
    pub suggest_threshold: f64,
}

impl Default for LearnConfig {
    fn default() -> Self {
        Self {
            min_successes: 3,
            min_confidence: 0.8,
            suggest_threshold: 0.8,
        }
    }
}

/// Whose learning a caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// Every scope (an admin, or the CLI on the store).
    All,
    /// One scope (`team:NAME`, `user:NAME`).
    Scope(String),
}

impl Viewer {
    fn sees(&self, scope: &str) -> bool {
        match self {
            Self::All => true,
            Self::Scope(own) => own == scope,
        }
    }
}

/// A proposal as the inbox shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ProposalView {
    pub proposal_id: String,
    pub workflow: String,
    pub scope: String,
    pub status: String,
    pub confidence: f64,
    pub successes: i64,
    pub executions: i64,
    pub tools: Vec<String>,
    /// Sessions and runs it was learned from.
    pub evidence: Value,
    /// Mean time the sequence took by hand.
    pub mean_ms: Option<i64>,
    pub proposed_at: DateTime<Utc>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub reason: Option<String>,
    /// The version it became, once approved.
    pub version: Option<String>,
    pub shared: bool,
    /// The generated workflow file.
    pub file: String,
    /// The same, as JSON.
    pub definition: Value,
}

/// What proposing found and did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ProposeReport {
    /// Scopes (teams, users) whose patterns the round looked at: every one on a
    /// learner's first round, then those whose patterns changed since its last.
    pub scopes: usize,
    /// Sequences strong enough to propose, in those scopes.
    pub candidates: usize,
    /// New proposals recorded.
    pub proposed: Vec<String>,
    /// Sequences a user-submitted workflow already does.
    pub covered: usize,
    /// Candidates whose details were read and file drafted (those whose executions
    /// changed since this learner, or a proposal, last drafted them).
    pub drafted: usize,
    /// Drafts not known to be proposed already (by this learner, or by a proposal in
    /// the log when it started): looked up in their workflow's stream and validated.
    pub checked: usize,
}

/// The learner's state, for `awl learn status`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LearnStatus {
    pub tool_calls: i64,
    pub sessions: i64,
    pub patterns: i64,
    pub proposals: std::collections::BTreeMap<String, i64>,
    pub min_successes: u64,
    pub min_confidence: f64,
}

/// One suggested workflow.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Suggestion {
    pub workflow: String,
    pub version: String,
    /// `user` (submitted by a person) or `learned`.
    pub source: &'static str,
    pub confidence: f64,
    /// How well it fits the context, from 0 to 1.
    pub score: f64,
    pub tools: Vec<String>,
    pub description: String,
    pub why: String,
}

/// A learned workflow's uses against the manual sequences it replaced.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LearnedUse {
    pub workflow: String,
    pub scope: String,
    pub runs: i64,
    pub succeeded: i64,
    pub success_rate: Option<f64>,
    /// Mean run time of its finished runs.
    pub mean_run_ms: Option<i64>,
    /// Mean time the sequence took by hand before.
    pub manual_mean_ms: Option<i64>,
}

/// The learning service.
#[derive(Clone)]
pub struct Learner {
    store: EventStore,
    config: LearnConfig,
    /// The files this learner already proposed or found proposed (see [`file_key`]), so
    /// a round of proposing reads the workflow stream and validates a file only for
    /// what is new. Seeded from the proposals projection on a learner's first round.
    known: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Each candidate pattern (by key) as this learner last drafted its file: a
    /// round reads the details of, and drafts, only the candidates that changed.
    /// Seeded, on a learner's first round, from the proposals already in the log (a
    /// proposal was drafted from its pattern at the executions it records), so a
    /// restarted server does not draft every known sequence again.
    drafted: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Drafted>>>,
    seeded: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// This learner's last complete round: the `learning` checkpoint it read before
    /// reading the patterns, and the user-submitted sequences then. The next round
    /// reads only the scopes whose patterns were written past that checkpoint (a
    /// scope's candidates depend on its patterns alone), unless the user-submitted
    /// sequences changed or the checkpoint went back (a rebuild): then every scope.
    last_round: std::sync::Arc<std::sync::Mutex<Option<Round>>>,
}

/// A pattern as its file was last drafted. A file is a function of the pattern's
/// details, which change only with its executions and, when they change, move the
/// pattern's `detailed` position: the same count or the same position means the same
/// file. The position is what matters under live load, where every sequence done
/// again adds executions while its details stay settled. (It is the position of the
/// call that changed them, so a rebuilt projection gives the same one.)
#[derive(Debug, Clone, Copy, PartialEq)]
struct Drafted {
    executions: u64,
    /// `None` when seeded from a proposal, which records only the executions.
    detailed: Option<i64>,
}

impl Drafted {
    fn covers(&self, executions: u64, detailed: Option<i64>) -> bool {
        self.executions == executions || (self.detailed.is_some() && self.detailed == detailed)
    }
}

/// The patterns a round chooses candidates from (counters and tools), by scope, and
/// where each one's details were last written.
#[derive(Default)]
struct Counted {
    by_scope: std::collections::BTreeMap<String, Vec<Pattern>>,
    detailed: std::collections::HashMap<String, Option<i64>>,
}

/// A stored pattern read whole: its scope, state and where its details were written.
struct Whole {
    scope: String,
    pattern: Pattern,
    detailed: Option<i64>,
}

/// What a round of proposing looked at.
#[derive(Debug, Clone, PartialEq)]
struct Round {
    checkpoint: i64,
    user_sequences: Vec<Vec<String>>,
}

/// The columns `propose` chooses candidates by: every one but `detail`.
const PATTERN_COUNTERS: &str = "pattern_key, scope, signature, length, executions, successes, \
    sessions, last_session, confidence, first_at, last_at, span_ms, detailed";

/// The namespace of derived proposal ids.
const PROPOSAL_NAMESPACE: Uuid = Uuid::from_u128(0x6c65_6172_6e65_6400_0000_0000_0000_0011);

fn text(row: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).map(str::to_string)
}

fn int(row: &serde_json::Map<String, Value>, key: &str) -> Option<i64> {
    row.get(key).and_then(Value::as_i64)
}

fn time(micros: Option<i64>) -> Option<DateTime<Utc>> {
    micros.and_then(DateTime::from_timestamp_micros)
}

impl Learner {
    pub fn new(store: EventStore, config: LearnConfig) -> Self {
        Self {
            store,
            config,
            known: Default::default(),
            drafted: Default::default(),
            seeded: Default::default(),
            last_round: Default::default(),
        }
    }

    fn last_round(&self) -> std::sync::MutexGuard<'_, Option<Round>> {
        // A panic while holding the lock leaves a hint: still usable.
        self.last_round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The scopes a round must look at: `None` for every one, else those whose patterns
    /// were written since the last round.
    async fn changed_scopes(&self, now: &Round) -> Result<Option<Vec<String>>, LearnError> {
        let since = match &*self.last_round() {
            Some(last)
                if last.checkpoint <= now.checkpoint
                    && last.user_sequences == now.user_sequences =>
            {
                last.checkpoint
            }
            _ => return Ok(None),
        };
        let rows = self
            .store
            .query_rows(
                "SELECT DISTINCT scope FROM tool_patterns WHERE changed > ?",
                &[Param::from(since)],
            )
            .await?;
        Ok(Some(rows.iter().filter_map(|r| text(r, "scope")).collect()))
    }

    /// The counters and tools of the patterns with enough successes (of `scopes`, or of
    /// every scope), by scope: enough to choose candidates.
    async fn counted_patterns(&self, scopes: Option<&[String]>) -> Result<Counted, LearnError> {
        let min = Param::from(i64::try_from(self.config.min_successes.max(1)).unwrap_or(1));
        let mut rows = Vec::new();
        match scopes {
            None => {
                rows = self
                    .store
                    .query_rows(
                        &format!(
                            "SELECT {PATTERN_COUNTERS} FROM tool_patterns WHERE successes >= ? ORDER BY pattern_key"
                        ),
                        &[min],
                    )
                    .await?;
            }
            Some(scopes) => {
                for chunk in scopes.chunks(500) {
                    let sql = format!(
                        "SELECT {PATTERN_COUNTERS} FROM tool_patterns WHERE successes >= ? AND scope IN ({}) ORDER BY pattern_key",
                        vec!["?"; chunk.len()].join(", ")
                    );
                    let mut params = vec![min.clone()];
                    params.extend(chunk.iter().map(|s| Param::from(s.clone())));
                    rows.extend(self.store.query_rows(&sql, &params).await?);
                }
            }
        }
        let mut counted = Counted::default();
        let mut unclear = Vec::new();
        for row in &rows {
            let key = text(row, "pattern_key").unwrap_or_default();
            match crate::projections::counted_pattern(row) {
                Some((scope, pattern)) => {
                    counted.by_scope.entry(scope).or_default().push(pattern);
                    counted
                        .detailed
                        .insert(key, int(row, "detailed").filter(|d| *d > 0));
                }
                None => unclear.push(key),
            }
        }
        for (key, whole) in self.whole_patterns(&unclear).await? {
            counted
                .by_scope
                .entry(whole.scope)
                .or_default()
                .push(whole.pattern);
            counted.detailed.insert(key, whole.detailed);
        }
        Ok(counted)
    }

    /// Fill `drafted` and `known` from the proposals projection, once. `drafted`: each
    /// proposed pattern (by scope and sequence) at the most executions a proposal of
    /// it records (a pattern's file is a function of its details, which change only
    /// with its executions: at the same count, drafting it again gives the proposed
    /// file). `known`: every proposed file, so a pattern whose executions moved since
    /// is drafted again but its file, if unchanged, is not looked up and validated.
    async fn seed(&self) -> Result<(), LearnError> {
        use std::sync::atomic::Ordering;
        if self.seeded.load(Ordering::Acquire) {
            return Ok(());
        }
        let rows = self
            .store
            .query_rows(
                "SELECT scope, tools, executions, definition FROM proposals",
                &[],
            )
            .await?;
        // The most executions any proposal of each pattern records.
        let mut most: std::collections::HashMap<String, u64> = Default::default();
        let mut known = self.known();
        for row in &rows {
            let (Some(scope), Some(tools)) = (
                text(row, "scope"),
                text(row, "tools").and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok()),
            ) else {
                continue;
            };
            if let Some(definition) =
                text(row, "definition").and_then(|d| serde_json::from_str::<Value>(&d).ok())
            {
                known.insert(file_key(&scope, &tools, &definition));
            }
            if let Some(executions) = int(row, "executions").and_then(|e| u64::try_from(e).ok()) {
                let key = crate::projections::pattern_key(
                    &scope,
                    &crate::domain::learning::signature(&tools),
                );
                let seen = most.entry(key).or_default();
                *seen = (*seen).max(executions);
            }
        }
        drop(known);
        let mut drafted = self.drafted();
        for (key, executions) in most {
            drafted.entry(key).or_insert(Drafted {
                executions,
                detailed: None,
            });
        }
        self.seeded.store(true, Ordering::Release);
        Ok(())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        // A panic while holding the lock leaves a set of strings: still usable.
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn drafted(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Drafted>> {
        // A panic while holding the lock leaves a map of hints: still usable.
        self.drafted.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config(&self) -> &LearnConfig {
        &self.config
    }

    /// Propose every strong enough sequence not yet proposed as it is now.
    pub async fn propose(&self, by: &str, now: DateTime<Utc>) -> Result<ProposeReport, LearnError> {
        self.seed().await?;
        // The checkpoint first: whatever the projection writes after it is past it.
        let checkpoint = crate::projections::queries::checkpoint(&self.store, "learning")
            .await
            .map_err(|e| match e {
                crate::projections::queries::QueryError::Store(e) => LearnError::Store(e),
                other => LearnError::Invalid(other.to_string()),
            })?;
        let round = Round {
            checkpoint,
            user_sequences: self.user_sequences().await?,
        };
        let scopes = self.changed_scopes(&round).await?;
        let counted = match &scopes {
            Some(scopes) if scopes.is_empty() => Counted::default(),
            scopes => self.counted_patterns(scopes.as_deref()).await?,
        };
        let by_scope = &counted.by_scope;
        let user_sequences = &round.user_sequences;
        let mut report = ProposeReport {
            scopes: by_scope.len(),
            ..ProposeReport::default()
        };
        let mut due = Vec::new();
        for (scope, patterns) in by_scope {
            for pattern in closed(
                patterns,
                self.config.min_successes,
                self.config.min_confidence,
            ) {
                report.candidates += 1;
                if user_sequences.contains(&pattern.tools) {
                    report.covered += 1;
                    continue;
                }
                let key = crate::projections::pattern_key(
                    scope,
                    &crate::domain::learning::signature(&pattern.tools),
                );
                let detailed = counted.detailed.get(&key).copied().flatten();
                if !self
                    .drafted()
                    .get(&key)
                    .is_some_and(|d| d.covers(pattern.executions, detailed))
                {
                    due.push(key);
                }
            }
        }
        // The whole patterns (details too) only of the candidates that changed.
        let mut whole = self.whole_patterns(&due).await?;
        report.drafted = whole.len();
        for key in due {
            let Some(Whole {
                scope,
                pattern,
                detailed,
            }) = whole.remove(&key)
            else {
                continue;
            };
            self.propose_one(&scope, &pattern, by, now, &mut report)
                .await?;
            let executions = pattern.executions;
            self.drafted().insert(
                key,
                Drafted {
                    executions,
                    detailed,
                },
            );
        }
        *self.last_round() = Some(round);
        Ok(report)
    }

    /// The stored patterns of `keys`, every column read, by key.
    async fn whole_patterns(
        &self,
        keys: &[String],
    ) -> Result<std::collections::HashMap<String, Whole>, LearnError> {
        let mut out = std::collections::HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(500) {
            let sql = format!(
                "SELECT * FROM tool_patterns WHERE pattern_key IN ({})",
                vec!["?"; chunk.len()].join(", ")
            );
            let params: Vec<Param> = chunk.iter().map(|k| Param::from(k.clone())).collect();
            for row in self.store.query_rows(&sql, &params).await? {
                let key = text(&row, "pattern_key").unwrap_or_default();
                let (scope, pattern) = crate::projections::stored_pattern(&row).map_err(|e| {
                    LearnError::Invalid(format!("a stored pattern cannot be read: {e}"))
                })?;
                let detailed = int(&row, "detailed").filter(|d| *d > 0);
                out.insert(
                    key,
                    Whole {
                        scope,
                        pattern,
                        detailed,
                    },
                );
            }
        }
        Ok(out)
    }

    /// The tool sequences of runnable user-submitted workflows.
    async fn user_sequences(&self) -> Result<Vec<Vec<String>>, LearnError> {
        let rows = self
            .store
            .query_rows(
                "SELECT tools FROM workflow_tools WHERE learned = 0 AND retired = 0",
                &[],
            )
            .await?;
        // Built-ins call nothing outside awl: a run's observed calls leave them out.
        let mut sequences: Vec<Vec<String>> = rows
            .iter()
            .filter_map(|r| serde_json::from_str::<Vec<String>>(&text(r, "tools")?).ok())
            .map(|tools| {
                tools
                    .into_iter()
                    .filter(|t| !crate::workflow::BUILTIN_TOOLS.contains(&t.as_str()))
                    .collect()
            })
            .collect();
        // Sorted: rounds compare them to tell whether they changed.
        sequences.sort_unstable();
        sequences.dedup();
        Ok(sequences)
    }

    /// Propose `pattern`'s file unless it was proposed already; counted in `report`.
    async fn propose_one(
        &self,
        scope: &str,
        pattern: &Pattern,
        by: &str,
        now: DateTime<Utc>,
        report: &mut ProposeReport,
    ) -> Result<(), LearnError> {
        let name = generate::workflow_name(scope, &pattern.tools);
        // The file as it would be now, whatever its version: known already, nothing to do.
        let draft = Value::Object(generate::definition(&name, "1.0.0", scope, pattern));
        let key = file_key(scope, &pattern.tools, &draft);
        if self.known().contains(&key) {
            return Ok(());
        }
        report.checked += 1;
        let state = definitions::catalog::load(&self.store, &name).await?;
        let next = state
            .versions()
            .map(|v| v.version.major())
            .max()
            .map_or(1, |major| major + 1);
        let version = Version::new(next, 0, 0).to_string();
        let definition = Value::Object(generate::definition(&name, &version, scope, pattern));
        // Checked exactly as `awl validate` checks a file.
        let file = to_yaml(&definition, &[]);
        let checked =
            crate::workflow::validate::check(Path::new(&format!("{name}.awl.yaml")), &file)
                .map_err(|d| LearnError::Generated {
                    workflow: name.clone(),
                    problems: d.to_string(),
                })?;
        let hash = definitions::content_hash(&checked.json);
        // The same file for the same sequence in the same scope is the same proposal,
        // whatever version number it would be given: proposed once, whatever a person
        // decided of it.
        let content = hash_without_version(&checked.json);
        if state.proposals().any(|p| {
            p.scope.as_deref() == Some(scope) && hash_without_version(&p.definition) == content
        }) {
            self.known().insert(key);
            return Ok(());
        }
        let seed = format!(
            "{scope}\n{}\n{content}",
            crate::domain::learning::signature(&pattern.tools),
        );
        let proposal_id = ProposalId::from_uuid(Uuid::new_v5(&PROPOSAL_NAMESPACE, seed.as_bytes()));
        let evidence = Evidence {
            successes: u32::try_from(pattern.successes).unwrap_or(u32::MAX),
            executions: u32::try_from(pattern.executions).unwrap_or(u32::MAX),
            example_runs: Vec::new(),
            tool_sequence: pattern.tools.clone(),
            sessions: pattern.evidence_sessions(),
            mean_ms: Some(pattern.mean_span_ms()),
        };
        let command = propose_command(
            &name,
            proposal_id,
            checked.json,
            &hash,
            pattern,
            evidence,
            scope,
            now,
        )?;
        workflow_command(&self.store, &name, by, command).await?;
        self.known().insert(key);
        report.proposed.push(proposal_id.to_string());
        Ok(())
    }

    /// Propose every `every` until `stop` says so: what mining found becomes proposals
    /// without anyone asking. Several servers may do it at once (a proposal's id is
    /// derived from what it proposes, so it is recorded once).
    pub async fn propose_every(
        &self,
        every: std::time::Duration,
        clock: crate::clock::Clock,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let began = std::time::Instant::now();
            let round = self.propose("awl", clock()).await;
            let took_ms = began.elapsed().as_secs_f64() * 1000.0;
            match round {
                Ok(report) => {
                    tracing::debug!(
                        scopes = report.scopes,
                        candidates = report.candidates,
                        drafted = report.drafted,
                        checked = report.checked,
                        took_ms,
                        "a round of proposing"
                    );
                    if !report.proposed.is_empty() {
                        tracing::info!(proposed = ?report.proposed, "learned workflows proposed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "proposing learned workflows failed; trying again")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
    }

    /// The proposals a viewer sees, newest first, optionally of one status.
    pub async fn proposals(
        &self,
        viewer: &Viewer,
        status: Option<&str>,
    ) -> Result<Vec<ProposalView>, LearnError> {
        let rows = self
            .store
            .query_rows(
                "SELECT * FROM proposals ORDER BY proposed_at DESC, proposal_id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(view_of)
            .filter(|p| viewer.sees(&p.scope))
            .filter(|p| status.is_none_or(|s| p.status.eq_ignore_ascii_case(s)))
            .collect())
    }

    /// One proposal, if the viewer sees it.
    pub async fn proposal(&self, viewer: &Viewer, id: &str) -> Result<ProposalView, LearnError> {
        let rows = self
            .store
            .query_rows(
                "SELECT * FROM proposals WHERE proposal_id = ?",
                &[Param::from(id)],
            )
            .await?;
        rows.first()
            .map(view_of)
            .filter(|p| viewer.sees(&p.scope))
            .ok_or_else(|| LearnError::UnknownProposal(id.to_string()))
    }

    /// A person approves a proposal: its workflow becomes a runnable, learned version.
    pub async fn approve(
        &self,
        viewer: &Viewer,
        id: &str,
        shared: bool,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<ProposalView, LearnError> {
        let proposal = self.open(viewer, id, "approved").await?;
        let version = proposal
            .version_in_file()
            .ok_or_else(|| LearnError::Invalid(format!("proposal {id} has no version")))?;
        let command = WorkflowCommand::ApproveProposal {
            proposal_id: proposal_id(id)?,
            version,
            shared,
            by: by.to_string(),
            at: now,
        };
        self.decide(&proposal.workflow, by, command).await?;
        Ok(ProposalView {
            status: "APPROVED".into(),
            decided_by: Some(by.to_string()),
            decided_at: Some(now),
            version: Some(version.to_string()),
            shared,
            ..proposal
        })
    }

    /// A person rejects a proposal, saying why.
    pub async fn reject(
        &self,
        viewer: &Viewer,
        id: &str,
        reason: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<ProposalView, LearnError> {
        if reason.trim().is_empty() {
            return Err(LearnError::Invalid("a rejection needs a reason".into()));
        }
        let proposal = self.open(viewer, id, "rejected").await?;
        let command = WorkflowCommand::RejectProposal {
            proposal_id: proposal_id(id)?,
            by: by.to_string(),
            reason: reason.to_string(),
            at: now,
        };
        self.decide(&proposal.workflow, by, command).await?;
        Ok(ProposalView {
            status: "REJECTED".into(),
            decided_by: Some(by.to_string()),
            decided_at: Some(now),
            reason: Some(reason.to_string()),
            ..proposal
        })
    }

    async fn open(
        &self,
        viewer: &Viewer,
        id: &str,
        action: &'static str,
    ) -> Result<ProposalView, LearnError> {
        let proposal = self.proposal(viewer, id).await?;
        if proposal.status != "OPEN" {
            return Err(LearnError::Decided {
                id: id.to_string(),
                status: proposal.status,
                action,
            });
        }
        Ok(proposal)
    }

    async fn decide(
        &self,
        workflow: &str,
        by: &str,
        command: WorkflowCommand,
    ) -> Result<(), LearnError> {
        Ok(workflow_command(&self.store, workflow, by, command).await?)
    }

    /// The workflows that fit `context`, best first: user-submitted ones before learned
    /// ones, then by confidence times fit; learned ones only of the viewer's scope or
    /// shared, and only at or above `threshold` (the configured one when `None`).
    pub async fn suggest(
        &self,
        viewer: &Viewer,
        context: &Context,
        threshold: Option<f64>,
        limit: usize,
    ) -> Result<Vec<Suggestion>, LearnError> {
        if context.is_empty() {
            return Err(LearnError::Invalid(
                "a suggestion needs a context: tool calls, a prompt or capabilities".into(),
            ));
        }
        let threshold = threshold.unwrap_or(self.config.suggest_threshold);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(LearnError::Invalid(format!(
                "threshold {threshold} is not between 0 and 1"
            )));
        }
        // Only the rows the viewer may be suggested: user-submitted, shared, or learned
        // in its own scope (not every team's learned workflows, parsed and dropped).
        let columns = "workflow, version, learned, scope, shared, confidence, tools, description";
        let rows = match viewer {
            Viewer::All => {
                self.store
                    .query_rows(
                        &format!(
                            "SELECT {columns} FROM workflow_tools WHERE retired = 0 AND confidence >= ?"
                        ),
                        &[Param::from(threshold)],
                    )
                    .await?
            }
            Viewer::Scope(scope) => {
                self.store
                    .query_rows(
                        &format!(
                            "SELECT {columns} FROM workflow_tools WHERE retired = 0 AND confidence >= ? \
                             AND (learned = 0 OR shared = 1 OR scope = ?)"
                        ),
                        &[Param::from(threshold), Param::from(scope.as_str())],
                    )
                    .await?
            }
        };
        let mut found = Vec::new();
        for row in &rows {
            let learned = int(row, "learned") == Some(1);
            let scope = text(row, "scope").unwrap_or_default();
            if learned && int(row, "shared") != Some(1) && !viewer.sees(&scope) {
                continue;
            }
            let tools: Vec<String> =
                serde_json::from_str(&text(row, "tools").unwrap_or_default()).unwrap_or_default();
            let Some(fit) = match_context(&tools, context) else {
                continue;
            };
            let confidence = row.get("confidence").and_then(Value::as_f64).unwrap_or(0.0);
            let source = if learned { "learned" } else { "user" };
            let why = if learned {
                format!("{}; learned with confidence {confidence:.2}", fit.why)
            } else {
                format!("{}; submitted by a person", fit.why)
            };
            found.push(Suggestion {
                workflow: text(row, "workflow").unwrap_or_default(),
                version: text(row, "version").unwrap_or_default(),
                source,
                confidence,
                score: fit.score,
                tools,
                description: text(row, "description").unwrap_or_default(),
                why,
            });
        }
        found.sort_by(|a, b| {
            (a.source == "learned")
                .cmp(&(b.source == "learned"))
                .then((b.confidence * b.score).total_cmp(&(a.confidence * a.score)))
                .then(a.workflow.cmp(&b.workflow))
        });
        found.truncate(limit.clamp(1, 50));
        Ok(found)
    }

    /// Whether `workflow` is a learned workflow suggested to the viewer (its own scope's,
    /// or shared, and not retired): what an agent may start itself.
    pub async fn suggestable(&self, viewer: &Viewer, workflow: &str) -> Result<bool, LearnError> {
        let rows = self
            .store
            .query_rows(
                "SELECT scope, shared FROM workflow_tools \
                 WHERE workflow = ? AND learned = 1 AND retired = 0",
                &[Param::from(workflow)],
            )
            .await?;
        Ok(rows.first().is_some_and(|row| {
            int(row, "shared") == Some(1) || viewer.sees(&text(row, "scope").unwrap_or_default())
        }))
    }

    /// How far mining got and what it found.
    pub async fn status(&self) -> Result<LearnStatus, LearnError> {
        let count = |sql: &'static str| async move {
            let rows = self.store.query_rows(sql, &[]).await?;
            Ok::<i64, LearnError>(rows.first().and_then(|r| int(r, "n")).unwrap_or(0))
        };
        let tool_calls = count("SELECT count(*) AS n FROM tool_calls").await?;
        let sessions = count("SELECT count(*) AS n FROM tool_tails").await?;
        let patterns = count("SELECT count(*) AS n FROM tool_patterns").await?;
        let mut proposals = std::collections::BTreeMap::new();
        for row in self
            .store
            .query_rows(
                "SELECT status, count(*) AS n FROM proposals GROUP BY status",
                &[],
            )
            .await?
        {
            proposals.insert(
                text(&row, "status").unwrap_or_default(),
                int(&row, "n").unwrap_or(0),
            );
        }
        Ok(LearnStatus {
            tool_calls,
            sessions,
            patterns,
            proposals,
            min_successes: self.config.min_successes,
            min_confidence: self.config.min_confidence,
        })
    }

    /// Every approved learned workflow the viewer sees: runs, success rate, time
    /// against the manual sequences it replaced.
    pub async fn uses(&self, viewer: &Viewer) -> Result<Vec<LearnedUse>, LearnError> {
        let approved = self.proposals(viewer, Some("APPROVED")).await?;
        let mut out = Vec::new();
        for p in approved {
            let rows = self
                .store
                .query_rows(
                    "SELECT count(*) AS runs, \
                     CAST(sum(CASE WHEN status = 'SUCCEEDED' THEN 1 ELSE 0 END) AS BIGINT) \
                     AS succeeded, CAST(avg(duration_ms) AS DOUBLE PRECISION) AS mean_ms \
                     FROM runs WHERE workflow = ?",
                    &[Param::from(p.workflow.clone())],
                )
                .await?;
            let row = rows.first();
            let runs = row.and_then(|r| int(r, "runs")).unwrap_or(0);
            let succeeded = row.and_then(|r| int(r, "succeeded")).unwrap_or(0);
            let mean = row.and_then(|r| r.get("mean_ms")).and_then(|v| {
                v.as_f64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                    .map(|f| f.round() as i64)
            });
            out.push(LearnedUse {
                workflow: p.workflow,
                scope: p.scope,
                runs,
                succeeded,
                success_rate: (runs > 0).then(|| succeeded as f64 / runs as f64),
                mean_run_ms: mean,
                manual_mean_ms: p.mean_ms,
            });
        }
        Ok(out)
    }
}

/// What tells one proposed file from another: its scope, its tool sequence and its
/// content without the version number, as validation completes it (a step that names
/// a tool is given `type: tool`). A draft and the checked file of a proposal give the
/// same key, so a new process knows the files already proposed without validating
/// every draft again.
fn file_key(scope: &str, tools: &[String], definition: &Value) -> String {
    let mut completed = definition.clone();
    crate::workflow::validate::default_step_types(&mut completed);
    format!(
        "{scope}\n{}\n{}",
        crate::domain::learning::signature(tools),
        hash_without_version(&completed)
    )
}

/// A definition's content hash, its version number left out.
fn hash_without_version(definition: &Value) -> String {
    let mut unversioned = definition.clone();
    if let Value::Object(map) = &mut unversioned {
        map.remove("version");
    }
    definitions::content_hash(&unversioned)
}

#[allow(clippy::too_many_arguments)]
fn propose_command(
    name: &str,
    proposal_id: ProposalId,
    definition: Value,
    hash: &str,
    pattern: &Pattern,
    evidence: Evidence,
    scope: &str,
    now: DateTime<Utc>,
) -> Result<WorkflowCommand, DefinitionError> {
    Ok(WorkflowCommand::Propose {
        workflow: WorkflowName::try_from(name)?,
        proposal_id,
        definition,
        content_hash: ContentHash::try_from(hash)?,
        confidence: pattern.confidence(),
        evidence,
        scope: Some(scope.to_string()),
        at: now,
    })
}

/// Decide `command` on the workflow's stream and append what it records.
async fn workflow_command(
    store: &EventStore,
    workflow: &str,
    by: &str,
    command: WorkflowCommand,
) -> Result<(), DefinitionError> {
    let stream = StreamRef::new(StreamType::Workflow, workflow);
    Command::new(store, &stream, Metadata::actor(by))
        .run(|state: &WorkflowDefinition| state.decide(command.clone()))
        .await?;
    Ok(())
}

fn proposal_id(id: &str) -> Result<ProposalId, LearnError> {
    id.parse::<Uuid>()
        .map(ProposalId::from_uuid)
        .map_err(|_| LearnError::UnknownProposal(id.to_string()))
}

impl ProposalView {
    fn version_in_file(&self) -> Option<Version> {
        self.definition.get("version")?.as_str()?.parse().ok()
    }
}

fn view_of(row: &serde_json::Map<String, Value>) -> ProposalView {
    let definition: Value =
        serde_json::from_str(&text(row, "definition").unwrap_or_default()).unwrap_or(Value::Null);
    let evidence: Value =
        serde_json::from_str(&text(row, "evidence").unwrap_or_default()).unwrap_or(Value::Null);
    let tools = serde_json::from_str(&text(row, "tools").unwrap_or_default()).unwrap_or_default();
    let scope = text(row, "scope").unwrap_or_default();
    let header = [
        format!(
            "Learned by awl from {} (proposal {}).",
            scope,
            text(row, "proposal_id").unwrap_or_default()
        ),
        "Check it, then approve it with `awl learn approve ID`.".to_string(),
    ];
    ProposalView {
        proposal_id: text(row, "proposal_id").unwrap_or_default(),
        workflow: text(row, "workflow").unwrap_or_default(),
        scope,
        status: text(row, "status").unwrap_or_default(),
        confidence: row.get("confidence").and_then(Value::as_f64).unwrap_or(0.0),
        successes: int(row, "successes").unwrap_or(0),
        executions: int(row, "executions").unwrap_or(0),
        tools,
        evidence,
        mean_ms: int(row, "mean_ms"),
        proposed_at: time(int(row, "proposed_at")).unwrap_or_default(),
        decided_by: text(row, "decided_by"),
        decided_at: time(int(row, "decided_at")),
        reason: text(row, "reason"),
        version: text(row, "version"),
        shared: int(row, "shared") == Some(1),
        file: to_yaml(&definition, &header),
        definition,
    }
}
