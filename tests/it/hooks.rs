//! Webhooks and debounced starts on both stores, through a real server: a delivery
//! signed as Standard Webhooks sign starts the hook's run with inputs mapped from
//! the body; a forged, unsigned or stale one is refused with 401 and records
//! nothing; the same delivery sent again answers with the first run. Starts of a
//! debounced workflow with one key within its window join the first run.

use std::sync::Arc;

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};

use awl::hooks::sign;

use crate::support::server::{Api, config, serve_with, tokens};
use crate::support::{Backend, TestStore, on_both_stores};

on_both_stores!(worker_threads = 2;
    signed_deliveries_start_runs_and_forged_replayed_or_stale_ones_do_not,
    starts_with_one_debounce_key_within_the_window_join_the_first,
);

const SECRET: &str = "whsec_c2VjcmV0IGtleSBvZiB0aGUgb3JkZXJzIGhvb2s=";

const ORDERS: &str = r#"
name: orders
version: "1.0.0"
inputs:
  order: { type: string, required: true }
  cents: { type: integer, required: true }
steps:
  - { id: work, tool: noop }
hooks:
  - name: shop-orders
    secret_env: SHOP_HOOK_SECRET
    tolerance_seconds: 300
    inputs:
      order: "${{ inputs.body.order.id }}"
      cents: "${{ inputs.body.order.total * 100 }}"
"#;

const SYNC: &str = r#"
name: sync
version: "1.0.0"
inputs:
  customer: { type: string, required: true }
  note: { type: string, default: "" }
debounce: { key: inputs.customer, window_seconds: 3600 }
steps:
  - { id: work, tool: noop }
"#;

async fn register(t: &TestStore, yaml: &str, name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join(format!("{name}.awl.yaml"));
    std::fs::write(&file, yaml).expect("write");
    awl::definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .expect("register");
    dir
}

/// POST a delivery to hook `name` with the given signature headers.
async fn deliver(
    api: &Api,
    name: &str,
    body: &str,
    headers: &[(&str, String)],
) -> (StatusCode, Value) {
    let mut request = api
        .http
        .post(format!("{}/api/v1/hooks/{name}", api.base))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        request = request.header(*k, v);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

fn signed(id: &str, at: i64, body: &str, secret: &str) -> Vec<(&'static str, String)> {
    let ts = at.to_string();
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-signature", sign(secret, id, &ts, body.as_bytes())),
        ("webhook-timestamp", ts),
    ]
}

async fn runs_started(t: &TestStore) -> Vec<Value> {
    crate::support::logged(&t.store, "run.started")
        .await
        .into_iter()
        .map(|e| e.payload)
        .collect()
}

async fn signed_deliveries_start_runs_and_forged_replayed_or_stale_ones_do_not(backend: Backend) {
    let t = TestStore::new(backend).await;
    let _dir = register(&t, ORDERS, "orders").await;
    let mut cfg = config();
    cfg.scheduler = false;
    cfg.hook_secrets =
        Arc::new(|name: &str| (name == "SHOP_HOOK_SECRET").then(|| SECRET.to_string()));
    let server = serve_with(&t.store, cfg, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    let body = r#"{"order": {"id": "o-17", "total": 12}}"#;
    let now = Utc::now().timestamp();

    // Good: a run with the mapped inputs, started by the hook.
    let (status, started) = deliver(
        &api,
        "shop-orders",
        body,
        &signed("msg_1", now, body, SECRET),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let runs = runs_started(&t).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["inputs"], json!({"order": "o-17", "cents": 1200}));
    assert_eq!(started["run_id"], runs[0]["run_id"]);

    // Replayed within the window: the same run, none started.
    let (status, again) = deliver(
        &api,
        "shop-orders",
        body,
        &signed("msg_1", now, body, SECRET),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["run_id"], started["run_id"]);

    // Forged: another secret, a changed body, a signature of another id.
    let forged_secret = signed("msg_2", now, body, "whsec_b3RoZXIgc2VjcmV0");
    let mut changed = signed("msg_3", now, body, SECRET);
    let other_body = r#"{"order": {"id": "o-18", "total": 99999}}"#;
    let mut swapped = signed("msg_4", now, body, SECRET);
    swapped[0].1 = "msg_5".into();
    for (what, headers, sent) in [
        ("another secret", forged_secret, body),
        ("a changed body", std::mem::take(&mut changed), other_body),
        ("another id", swapped, body),
    ] {
        let (status, error) = deliver(&api, "shop-orders", sent, &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {error}");
        assert_eq!(
            error["error"]["code"], "hook_signature_invalid",
            "{what}: {error}"
        );
    }
    // Stale: signed 10 minutes ago (a captured delivery replayed later), or ahead.
    for at in [now - 600, now + 600] {
        let (status, error) = deliver(
            &api,
            "shop-orders",
            body,
            &signed("msg_6", at, body, SECRET),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{error}");
        assert_eq!(error["error"]["code"], "hook_stale", "{error}");
    }
    // Unsigned, an unknown hook, a body the mapping cannot read.
    let (status, error) = deliver(&api, "shop-orders", body, &[]).await;
    assert_eq!(
        (status, error["error"]["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!("hook_unsigned")),
        "{error}"
    );
    let (status, error) = deliver(&api, "nope", body, &signed("msg_7", now, body, SECRET)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    let bad = r#"{"order": {}}"#;
    let (status, error) =
        deliver(&api, "shop-orders", bad, &signed("msg_8", now, bad, SECRET)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("inputs"),
        "{error}"
    );
    // Nothing else was started.
    assert_eq!(runs_started(&t).await.len(), 1);
    // A second good delivery starts a second run.
    let other = r#"{"order": {"id": "o-19", "total": 1}}"#;
    let (status, _) = deliver(
        &api,
        "shop-orders",
        other,
        &signed("msg_9", now, other, SECRET),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(runs_started(&t).await.len(), 2);
}

async fn starts_with_one_debounce_key_within_the_window_join_the_first(backend: Backend) {
    use reqwest::Method;
    let t = TestStore::new(backend).await;
    let _dir = register(&t, SYNC, "sync").await;
    let tk = tokens(&t.store, &[]).await;
    let mut cfg = config();
    cfg.scheduler = false;
    let server = serve_with(&t.store, cfg, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    let start = |customer: &str, note: &str| json!({"workflow": "sync", "inputs": {"customer": customer, "note": note}});
    // Eight concurrent starts for one customer, two for another.
    let mut calls = Vec::new();
    for i in 0..8 {
        let api = api.clone();
        let body = start("acme", &format!("n{i}"));
        let token = tk.operator.clone();
        calls.push(tokio::spawn(async move {
            api.call(Some(&token), Method::POST, "/api/v1/runs", Some(body))
                .await
        }));
    }
    for i in 0..2 {
        let api = api.clone();
        let body = start("globex", &format!("g{i}"));
        let token = tk.operator.clone();
        calls.push(tokio::spawn(async move {
            api.call(Some(&token), Method::POST, "/api/v1/runs", Some(body))
                .await
        }));
    }
    let mut by_customer: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (i, call) in calls.into_iter().enumerate() {
        let (status, body) = call.await.expect("join");
        assert!(status.is_success(), "{status}: {body}");
        let customer = if i < 8 { "acme" } else { "globex" };
        by_customer
            .entry(customer.into())
            .or_default()
            .insert(body["run_id"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(by_customer["acme"].len(), 1, "{by_customer:?}");
    assert_eq!(by_customer["globex"].len(), 1, "{by_customer:?}");
    let runs = runs_started(&t).await;
    assert_eq!(runs.len(), 2, "one run per key within the window");
    let owners = crate::support::logged(&t.store, "debounce.started").await;
    assert_eq!(owners.len(), 2);
    // A key whose expression fails is refused before anything is recorded.
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/runs",
            Some(json!({"workflow": "sync", "inputs": {"note": "x"}})),
        )
        .await;
    assert_eq!(status.as_u16(), 422, "{body}");
    assert_eq!(runs_started(&t).await.len(), 2);
}
