//! A PostgreSQL cluster of the test's own, which the test may crash: `initdb` into a
//! fresh directory, `pg_ctl start` on a free port, `pg_ctl stop -m immediate` (no
//! checkpoint, no clean shutdown: what a power cut or a killed server leaves, recovered
//! from the WAL at the next start) and start again on the same port and data; and a
//! streaming replica of such a cluster (`pg_basebackup -R`).
//!
//! The binaries are Debian's (`/usr/lib/postgresql/*/bin`) or the first on `PATH`. As
//! root, `initdb` and the server run as the `postgres` system user. The file stands
//! alone (std and uuid only) so the scale benchmark includes it too.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A port nothing listens on (for a cluster or an `awl serve` child process).
///
/// Taken below Linux's ephemeral range (32768-60999), from which the kernel hands out
/// both `bind(0)` ports and the local ports of outgoing connections: a port found
/// free there could be taken by one of the suite's own connections (to Postgres, to
/// a server) before the child binds it, and the child then never answers. Each call
/// moves on from the last, starting at a place of this process's own, so two calls
/// do not give the same port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

fn pg_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("AWL_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    found.sort();
    if let Some(newest) = found.pop() {
        return newest;
    }
    let which = Command::new("sh")
        .args(["-c", "command -v pg_ctl"])
        .output()
        .expect("look for pg_ctl");
    let path = String::from_utf8_lossy(&which.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "no PostgreSQL server binaries (pg_ctl, initdb): install Debian's postgresql or set AWL_TEST_PG_BIN"
    );
    Path::new(&path).parent().expect("a folder").to_path_buf()
}

impl Cluster {
    /// A new cluster, started (durable settings: fsync, synchronous_commit and
    /// full_page_writes on, as in production).
    pub fn start() -> Self {
        let bin = pg_bin_dir();
        let as_postgres = nix_is_root();
        let dir = std::env::temp_dir().join(format!("awl-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("the cluster's folder");
        if as_postgres {
            run(Command::new("chown").args(["postgres", &dir.to_string_lossy()]));
        }
        let cluster = Self {
            port: free_port(),
            dir,
            bin,
            as_postgres,
        };
        let data = cluster.data();
        cluster.pg(
            "initdb",
            &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        );
        cluster.start_again();
        cluster
    }

    /// A streaming replica of this cluster, started: `pg_basebackup -R` (a standby
    /// that replays the primary's WAL as it is streamed) into a fresh directory, on a
    /// port of its own. initdb's default `pg_hba.conf` lets local replication in.
    pub fn replica(&self) -> Self {
        let dir = std::env::temp_dir().join(format!("awl-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("the replica's folder");
        if self.as_postgres {
            run(Command::new("chown").args(["postgres", &dir.to_string_lossy()]));
        }
        let replica = Self {
            port: free_port(),
            dir,
            bin: self.bin.clone(),
            as_postgres: self.as_postgres,
        };
        let data = replica.data();
        let port = self.port.to_string();
        replica.pg(
            "pg_basebackup",
            &[
                "-D",
                &data,
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        replica.start_again();
        replica
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    /// The URL of `database` (`postgres` exists from the start).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Start the server (again) on the same data and port; waits until it accepts
    /// connections.
    pub fn start_again(&self) {
        let log = self.dir.join("server.log").to_string_lossy().into_owned();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {}",
            self.port,
            self.dir.to_string_lossy()
        );
        self.pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-o",
                &options,
                "start",
            ],
        );
    }

    /// Kill the server as a crash would: no checkpoint, clients cut at once.
    pub fn crash(&self) {
        self.pg(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    /// The server's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn pg(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        cmd.args(args);
        run(&mut cmd);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl");
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
