//! A TCP proxy between awl and its database that a test can cut and restore: cut, it
//! drops every connection and closes new ones at once, as an unreachable database
//! would; restored, it forwards again. Armed with a marker ([`Proxy::cut_after`]), it
//! forwards the next client message that contains it to the database, lets the
//! database answer, and drops the connection before the answer reaches the client:
//! the client cannot know whether, say, its `COMMIT` happened.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    marker: Arc<Mutex<Option<Vec<u8>>>>,
    /// How many connections were dropped after a marker.
    pub marker_cuts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forward a local port to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let open = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let marker: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let marker_cuts = Arc::new(AtomicUsize::new(0));
        let task = {
            let open = open.clone();
            let cuts = cuts.clone();
            let marker = marker.clone();
            let marker_cuts = marker_cuts.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let mut cut = cuts.subscribe();
                    let marker = marker.clone();
                    let marker_cuts = marker_cuts.clone();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = pump(client, server, marker, marker_cuts) => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            })
        };
        Self {
            addr,
            open,
            cuts,
            marker,
            marker_cuts,
            task,
        }
    }

    /// A proxy to the Postgres server `url` names, and `url` through the proxy.
    pub async fn to_postgres(url: &str) -> (Self, String) {
        let target = postgres_address(url);
        let proxy = Self::start(target).await;
        let proxied = url.replacen(&target.to_string(), &proxy.addr.to_string(), 1);
        assert_ne!(proxied, url, "the URL {url} names {target}");
        (proxy, proxied)
    }

    /// Drop the next connection whose client sends `marker`, after the database got
    /// the message and before its answer reaches the client (once).
    pub fn cut_after(&self, marker: &[u8]) {
        *self.marker.lock().expect("the marker") = Some(marker.to_vec());
    }

    /// Drop every connection and refuse new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Forward again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// Forward both ways until either side closes, or until the client sends the armed
/// marker: then the server's answers stop being forwarded and, once the server has
/// had time to act on the message, both sides are dropped.
async fn pump(
    client: TcpStream,
    server: TcpStream,
    marker: Arc<Mutex<Option<Vec<u8>>>>,
    marker_cuts: Arc<AtomicUsize>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let swallow = Arc::new(AtomicBool::new(false));
    let upstream = {
        let swallow = swallow.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let hit = {
                    let mut armed = marker.lock().expect("the marker");
                    let hit = armed
                        .as_ref()
                        .is_some_and(|m| buf[..n].windows(m.len()).any(|w| w == m.as_slice()));
                    if hit {
                        *armed = None;
                        swallow.store(true, Ordering::SeqCst);
                    }
                    hit
                };
                if server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                if hit {
                    // Let the database carry the message out, then drop the line.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    marker_cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if swallow.load(Ordering::SeqCst) {
                continue;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either side closing (or a marker) ends the connection: dropping the halves
    // closes the other side too.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The host and port a Postgres URL names.
fn postgres_address(url: &str) -> SocketAddr {
    let rest = url.split("://").nth(1).expect("a URL");
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let host_port = if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5432")
    };
    host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .unwrap_or_else(|e| panic!("{host_port}: {e}"))
}
