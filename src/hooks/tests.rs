use chrono::TimeZone;
use serde_json::json;

use super::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[test]
fn the_standard_webhooks_example_verifies() {
    // The example of the Standard Webhooks specification's reference libraries.
    let body = br#"{"test": 2432232314}"#;
    let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    let ts = "1614265330";
    let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    verify(SECRET, id, ts, body, signature).expect("the spec's example");
    assert_eq!(sign(SECRET, id, ts, body), signature);
    // One of several (a rotation) is enough; none of a forged set is.
    verify(SECRET, id, ts, body, &format!("v1,AAAA {signature}")).expect("one of two");
    for forged in [
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=",
        "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        "",
        "v1,not base64!",
    ] {
        assert!(
            matches!(verify(SECRET, id, ts, body, forged), Err(HookError::Forged)),
            "{forged:?}"
        );
    }
    // Another body, id or time under the same signature: forged.
    assert!(verify(SECRET, id, ts, br#"{"test": 1}"#, signature).is_err());
    assert!(verify(SECRET, "msg_other", ts, body, signature).is_err());
    assert!(verify(SECRET, id, "1614265331", body, signature).is_err());
    assert!(verify("whsec_b3RoZXI=", id, ts, body, signature).is_err());
}

#[test]
fn a_delivery_outside_the_tolerance_is_stale() {
    let now = Utc.timestamp_opt(1_614_265_330, 0).unwrap();
    fresh("1614265330", now, 300).expect("now");
    fresh("1614265030", now, 300).expect("300s ago");
    fresh("1614265630", now, 300).expect("300s ahead");
    assert!(matches!(
        fresh("1614265029", now, 300),
        Err(HookError::Stale { .. })
    ));
    assert!(matches!(
        fresh("1614265631", now, 300),
        Err(HookError::Stale { .. })
    ));
    assert!(matches!(
        fresh("yesterday", now, 300),
        Err(HookError::Body(_))
    ));
}

#[test]
fn a_delivery_maps_to_inputs_through_the_hooks_templates() {
    let hook: HookSpec = serde_json::from_value(json!({
        "name": "orders",
        "secret_env": "ORDERS_SECRET",
        "inputs": {
            "order": "${{ inputs.body.order.id }}",
            "amount": "${{ inputs.body.order.total * 100 }}",
            "source": "${{ inputs.headers['user-agent'] }}"
        }
    }))
    .unwrap();
    let mut headers = Map::new();
    headers.insert("user-agent".into(), json!("shop/1.0"));
    let delivery = Delivery {
        body: br#"{"order": {"id": "o-17", "total": 12}}"#.to_vec(),
        headers,
        ..Delivery::default()
    };
    let inputs = map_inputs(&hook, &delivery).unwrap();
    assert_eq!(
        Value::Object(inputs),
        json!({"order": "o-17", "amount": 1200, "source": "shop/1.0"})
    );
    let plain = HookSpec {
        inputs: None,
        ..hook.clone()
    };
    let as_is = map_inputs(&plain, &delivery).unwrap();
    assert_eq!(as_is["order"]["id"], "o-17");
    let refused = map_inputs(
        &plain,
        &Delivery {
            body: b"[1, 2]".to_vec(),
            ..Delivery::default()
        },
    );
    assert!(matches!(refused, Err(HookError::Body(_))));
    let missing = map_inputs(
        &hook,
        &Delivery {
            body: b"{}".to_vec(),
            ..Delivery::default()
        },
    );
    assert!(matches!(missing, Err(HookError::Body(_))), "{missing:?}");
}
