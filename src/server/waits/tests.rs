use super::*;
use crate::auth::Role;

fn agent(name: &str) -> AgentId {
    AgentId::try_from(name).expect("an agent id")
}

fn token(name: &str) -> Principal {
    Principal {
        name: name.into(),
        role: Role::Agent,
        team: None,
    }
}

#[test]
fn a_token_holds_at_most_its_slots_and_gets_them_back() {
    let slots = WaitSlots::new(2);
    let (t1, a1) = (token("agent-1"), agent("agent-1"));
    let first = slots.take(&t1, &a1, true).expect("first");
    let _second = slots.take(&t1, &a1, true).expect("second");
    let refused = slots.take(&t1, &a1, true).err().expect("third refused");
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.code, "too_many_waits");
    assert!(
        refused.message.contains("token agent-1"),
        "{}",
        refused.message
    );
    assert!(
        slots
            .take(&token("agent-2"), &agent("agent-2"), true)
            .is_ok(),
        "other tokens are counted apart"
    );
    drop(first);
    assert_eq!(slots.open(), 1, "the second, still open");
    assert!(
        slots.take(&t1, &a1, true).is_ok(),
        "a slot comes back when its wait ends"
    );
}

#[test]
fn one_token_counts_once_whatever_agent_it_names() {
    let slots = WaitSlots::new(1);
    let admin = token("root");
    let _one = slots.take(&admin, &agent("a"), true).expect("first");
    assert!(
        slots.take(&admin, &agent("b"), true).is_err(),
        "the same token"
    );
}

#[test]
fn with_auth_off_each_agent_counts_apart() {
    // Every caller is the local admin then; agents name themselves.
    let slots = WaitSlots::new(1);
    let local = Principal::local();
    let _a = slots.take(&local, &agent("a"), false).expect("agent a");
    let _b = slots.take(&local, &agent("b"), false).expect("agent b");
    let refused = slots
        .take(&local, &agent("a"), false)
        .err()
        .expect("a again");
    assert!(refused.message.contains("agent a"), "{}", refused.message);
}
