use super::*;

#[test]
fn a_token_holds_at_most_its_slots_and_gets_them_back() {
    let slots = WaitSlots::new(2);
    let a = slots.take("agent-1").expect("first");
    let _b = slots.take("agent-1").expect("second");
    let refused = slots.take("agent-1").err().expect("third refused");
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        slots.take("agent-2").is_ok(),
        "other tokens are counted apart"
    );
    drop(a);
    assert_eq!(slots.open("agent-1"), 1);
    assert!(
        slots.take("agent-1").is_ok(),
        "a slot comes back when its wait ends"
    );
}
