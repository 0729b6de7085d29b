//! Ids and keys the engine derives instead of inventing, so that deciding the same
//! thing twice (after a crash, on replay) names the same gate, task or child run.

use uuid::Uuid;

use crate::domain::ids::{GateId, RunId, StepId, TaskId};

/// The namespace of awl's derived UUIDs (v5).
const NAMESPACE: Uuid = Uuid::from_u128(0x6177_6c00_0000_4000_8000_0000_0000_0001);

fn derived(run: RunId, parts: &[&str]) -> Uuid {
    let mut name = run.to_string();
    for part in parts {
        name.push('/');
        name.push_str(part);
    }
    Uuid::new_v5(&NAMESPACE, name.as_bytes())
}

/// The idempotency key of one attempt: the same for every start of that attempt, so a
/// step restarted after a crash can tell the outside world it is the same call.
pub fn idempotency_key(run: RunId, step: &StepId, attempt: u32) -> String {
    format!("{run}/{step}/{attempt}")
}

/// The idempotency key the work of a step sees (a shell step's `AWL_IDEMPOTENCY_KEY`):
/// the same for every attempt of one step of one run, restarts included, so a retry
/// can recognise work an earlier attempt already did. [`idempotency_key`] is the key
/// of one attempt, which tells attempts apart in the log and among work in flight.
pub fn step_idempotency_key(run: RunId, step: &StepId) -> String {
    format!("{run}/{step}")
}

/// The key of the compensation of `step`.
pub fn compensation_key(run: RunId, step: &StepId) -> String {
    format!("{run}/{step}/compensate")
}

/// The gate a `gate` step opens (or an `escalate` recovery, for `attempt`).
pub fn gate_id(run: RunId, step: &StepId, attempt: u32) -> GateId {
    GateId::from_uuid(derived(run, &[step.as_str(), &attempt.to_string(), "gate"]))
}

/// The gate an `escalate` recovery opens after `attempt` of `step` failed.
pub fn escalation_gate_id(run: RunId, step: &StepId, attempt: u32) -> GateId {
    GateId::from_uuid(derived(
        run,
        &[step.as_str(), &attempt.to_string(), "escalate"],
    ))
}

/// The gate a `budget` escalation opens (one per run).
pub fn budget_gate_id(run: RunId) -> GateId {
    GateId::from_uuid(derived(run, &["budget"]))
}

/// The task an `agent` step queues for `attempt`.
pub fn task_id(run: RunId, step: &StepId, attempt: u32) -> TaskId {
    TaskId::from_uuid(derived(run, &[step.as_str(), &attempt.to_string(), "task"]))
}

/// The child run a `workflow` step starts for `attempt`.
pub fn child_run_id(run: RunId, step: &StepId, attempt: u32) -> RunId {
    RunId::from_uuid(derived(run, &[step.as_str(), &attempt.to_string(), "run"]))
}

/// A number in [0, 1) that depends only on the attempt: the jitter of its back-off.
pub fn unit_hash(run: RunId, step: &StepId, attempt: u32) -> f64 {
    let uuid = derived(run, &[step.as_str(), &attempt.to_string(), "jitter"]);
    (uuid.as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::from_uuid(Uuid::from_u128(7))
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let build = StepId::try_from("build").unwrap();
        let ship = StepId::try_from("ship").unwrap();
        assert_eq!(gate_id(run(), &build, 1), gate_id(run(), &build, 1));
        assert_ne!(gate_id(run(), &build, 1), gate_id(run(), &build, 2));
        assert_ne!(gate_id(run(), &build, 1), gate_id(run(), &ship, 1));
        assert_ne!(
            task_id(run(), &build, 1).as_uuid(),
            gate_id(run(), &build, 1).as_uuid()
        );
        assert_eq!(
            idempotency_key(run(), &build, 3),
            format!("{}/build/3", run())
        );
    }

    #[test]
    fn the_unit_hash_is_in_range_and_spread() {
        let step = StepId::try_from("s").unwrap();
        let values: Vec<f64> = (1..200).map(|a| unit_hash(run(), &step, a)).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let below_half = values.iter().filter(|v| **v < 0.5).count();
        assert!(
            (60..140).contains(&below_half),
            "{below_half} of 199 below 0.5"
        );
    }
}
