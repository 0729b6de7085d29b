//! What several commands share: who is acting, a worker's name, the environment
//! workflows may read, the step runners as configured by the environment, the stop
//! signal, and how a duration is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::runners::{Runners, RunnersConfig};

/// Who is acting: `--by`, else `$USER`, else `cli`.
pub fn actor(by: &Option<String>) -> String {
    by.clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cli".into())
}

/// A worker owner name: unique per process.
pub fn owner(kind: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!(
        "{kind}:{host}:{}:{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Variables expressions may read: `--env-allow NAME` and `AWL_ENV_ALLOW=HOME,CI`.
pub fn allowed_env(names: &[String]) -> BTreeMap<String, String> {
    named_env(names, "AWL_ENV_ALLOW")
}

/// The variables named by `names` and by the comma-separated list in `list_var`, with
/// their values (unset ones left out).
fn named_env(names: &[String], list_var: &str) -> BTreeMap<String, String> {
    let mut all: BTreeSet<String> = names.iter().cloned().collect();
    if let Ok(list) = std::env::var(list_var) {
        all.extend(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        );
    }
    all.into_iter()
        .filter_map(|name| std::env::var(&name).ok().map(|v| (name, v)))
        .collect()
}

/// Env variables declared secret (`--secret-env NAME`, `AWL_SECRET_ENV=A,B`): readable
/// by expressions like allowlisted ones, and masked in every run's events and spans,
/// with awl's own connection strings (the store's URL, `AWL_CONNECTION_*`) and their
/// passwords. Returns the variables to add to the allowlist and the mask.
pub fn secrets(
    names: &[String],
    store: &crate::store::EventStore,
) -> (BTreeMap<String, String>, crate::vault::Mask) {
    let env = named_env(names, "AWL_SECRET_ENV");
    let mut mask = crate::vault::Mask::new(env.values().cloned());
    let mut urls: Vec<String> = connections().into_values().collect();
    if let crate::store::StoreLocation::Postgres(url) = store.location() {
        urls.push(url.clone());
    }
    for url in urls {
        if let Ok(parsed) = reqwest::Url::parse(&url)
            && let Some(password) = parsed.password()
        {
            mask.extend([password.to_string()]);
        }
        mask.extend([url]);
    }
    (env, mask)
}

/// Database connections for `database` steps: `AWL_CONNECTION_<NAME>=url`.
fn connections() -> BTreeMap<String, String> {
    std::env::vars()
        .filter_map(|(k, v)| {
            k.strip_prefix("AWL_CONNECTION_")
                .map(|name| (name.to_ascii_lowercase(), v))
        })
        .collect()
}

/// The step runners, with the connections the environment names.
pub fn runners() -> Runners {
    Runners::new(RunnersConfig {
        connections: connections(),
        ..RunnersConfig::default()
    })
}

/// The step runners, with `notify` steps' `chat:` channels from `chat`.
pub fn runners_with_chat(
    chat: Option<std::sync::Arc<crate::chat::ChatConfig>>,
) -> anyhow::Result<Runners> {
    let chat = match chat {
        Some(config) => Some(crate::runners::ChatTarget(std::sync::Arc::new(
            crate::chat::Sender::new(config)?,
        ))),
        None => None,
    };
    Ok(Runners::new(RunnersConfig {
        connections: connections(),
        chat,
        ..RunnersConfig::default()
    }))
}

/// The chat file `AWL_CHAT_CONFIG` names, or `./chat.yaml` when it exists.
pub fn chat_from_env() -> anyhow::Result<Option<std::sync::Arc<crate::chat::ChatConfig>>> {
    let named = std::env::var_os("AWL_CHAT_CONFIG").map(std::path::PathBuf::from);
    Ok(super::chat::chat_file(named.as_deref())?.map(std::sync::Arc::new))
}

/// Wait for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A duration as people read it: `420 ms`, `3.2 s`, `4m05s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1_000) % 60)
    }
}

/// The time between two instants of a run, as people read it.
pub fn between(start: chrono::DateTime<chrono::Utc>, end: chrono::DateTime<chrono::Utc>) -> String {
    human((end - start).to_std().unwrap_or_default())
}
