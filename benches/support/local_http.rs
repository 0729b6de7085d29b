//! The local HTTP server `http` steps call in the benchmarks: `GET /ok` answers a
//! small JSON body, on loopback, in the benchmark's own process (so on the same 2
//! cores as everything else).

/// Start it; its address.
pub async fn local_http_server() -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/ok",
        axum::routing::get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    addr
}
