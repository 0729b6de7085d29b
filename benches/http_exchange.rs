//! What one `http` step's exchange costs in CPU, without the executor: the same
//! `GET` to the same local server (axum, as in the executor benchmark), 512 in
//! flight for 3 s, through
//!
//! - `reqwest`: a reqwest client built as awl's `http` runner built it until it
//!   went to hyper's client directly (connect timeout, user agent);
//! - `hyper`: hyper-util's pooled client alone, reqwest's own core;
//! - `awl`: awl's `http` runner itself (`Runners::http`: the direct client, the
//!   span, the output built from the answer).
//!
//! Requests per second and this process's CPU time per request (client and server
//! both: they share the process), read from /proc. The clients take turns, twice.
//!
//! ```sh
//! cargo bench --bench http_exchange            # every client, two rounds
//! cargo bench --bench http_exchange -- hyper   # one client, four rounds (for perf)
//! cargo bench --bench http_exchange -- awl --count 20000   # exactly 20,000 requests, once
//! ```
//!
//! `--count N` sends exactly N requests (N/512 a loop) and stops: under
//! `valgrind --tool=callgrind`, the instructions of two counts' runs, subtracted and
//! divided by the difference, are a request's cost in instructions, which do not
//! move with the machine's speed or load as CPU time does.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use awl::domain::ids::RunId;
use awl::runners::{Attempt, Runners, RunnersConfig};
use awl::workflow::model::HttpStep;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};

#[path = "support/local_http.rs"]
mod local_http;

type HyperClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// utime + stime of this process in microseconds (Linux; 100 ticks a second).
fn cpu_us() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10_000.0)
}

#[derive(Clone)]
enum Client {
    Reqwest(reqwest::Client),
    Hyper(Box<HyperClient>),
    Awl(Runners, Arc<HttpStep>),
}

impl Client {
    fn named(name: &str, url: &str) -> Self {
        match name {
            "reqwest" => Self::Reqwest(
                reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .user_agent("awl/0.1.0")
                    .build()
                    .expect("client"),
            ),
            "hyper" => Self::Hyper(Box::new(
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http(),
            )),
            _ => Self::Awl(
                Runners::new(RunnersConfig::default()),
                Arc::new(serde_json::from_value(serde_json::json!({"url": url})).expect("a step")),
            ),
        }
    }

    async fn get(&self, url: &str) {
        match self {
            Self::Reqwest(c) => {
                let body = c
                    .get(url)
                    .send()
                    .await
                    .expect("send")
                    .bytes()
                    .await
                    .expect("body");
                let _: serde_json::Value = serde_json::from_slice(&body).expect("json");
            }
            Self::Hyper(c) => {
                let request = hyper::Request::get(url)
                    .header("user-agent", "awl/0.1.0")
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let body = c.request(request).await.expect("send").into_body();
                let body = body.collect().await.expect("body").to_bytes();
                let _: serde_json::Value = serde_json::from_slice(&body).expect("json");
            }
            Self::Awl(runners, step) => {
                let attempt = Attempt {
                    run_id: RunId::new(),
                    step_id: "call",
                    attempt: 1,
                    idempotency_key: "k",
                    timeout: Some(Duration::from_secs(30)),
                    base_dir: std::path::Path::new("."),
                    mask: &awl::vault::mask::NO_SECRETS,
                };
                runners
                    .http(&attempt, step)
                    .await
                    .expect("the step succeeds");
            }
        }
    }
}

/// Exactly `count` requests through `name` (`count / 512` a loop): the time taken.
async fn send_count(name: &str, server: std::net::SocketAddr, count: usize) -> Duration {
    let url = format!("http://{server}/ok");
    let client = Client::named(name, &url);
    let started = Instant::now();
    let loops: Vec<_> = (0..512)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                for _ in 0..count / 512 {
                    client.get(&url).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("a loop");
    }
    started.elapsed()
}

/// Requests per second and CPU µs per request of `name` against `server`.
async fn measure(name: &str, server: std::net::SocketAddr) -> (f64, f64) {
    let url = format!("http://{server}/ok");
    let client = Client::named(name, &url);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let loops: Vec<_> = (0..512)
        .map(|_| {
            let (client, url, stop, done) =
                (client.clone(), url.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    client.get(&url).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Connections opened first: requests on open connections are measured.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu0, n0, t0) = (cpu_us(), done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu1, n1, secs) = (
        cpu_us(),
        done.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let _ = l.await;
    }
    let requests = (n1 - n0) as f64;
    let us = cpu0.zip(cpu1).map_or(f64::NAN, |(a, b)| (b - a) / requests);
    (requests / secs, us)
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = local_http::local_http_server().await;
    // `cargo bench` passes `--bench`; a client's name picks that one alone.
    let (mut only, mut count) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--count" => {
                let n = args.next().and_then(|n| n.parse::<usize>().ok());
                count = Some(n.expect("--count takes a number"));
            }
            flag if flag.starts_with('-') => {}
            name => only = Some(name.to_string()),
        }
    }
    if let Some(count) = count {
        let name = only.as_deref().unwrap_or("awl");
        let took = send_count(name, server, count).await;
        println!("{name}: {} requests in {took:?}", count / 512 * 512);
        return;
    }
    let (names, rounds) = match &only {
        Some(name) => (vec![name.as_str()], 4),
        None => (vec!["reqwest", "hyper", "awl"], 2),
    };
    println!("| client | round | requests/s | CPU µs a request |\n|---|---:|---:|---:|");
    for round in 1..=rounds {
        for name in &names {
            let (rate, us) = measure(name, server).await;
            println!("| {name} | {round} | {rate:.0} | {us:.1} |");
        }
    }
}
