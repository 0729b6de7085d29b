//! `awl events`: print the log, filtered, as text or JSON lines; `--follow` tails it.

use std::io::Write;

use anyhow::Context;
use chrono::{SecondsFormat, Utc};
use clap::Args;
use futures_util::StreamExt;

use crate::log::{EventFilter, RecordedEvent, StreamType};
use crate::store::EventStore;

use super::time_arg::parse_time;

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only streams of this type (workflow, run, task, agent, bulk); repeatable.
    #[arg(long = "stream-type", value_name = "TYPE")]
    stream_types: Vec<StreamType>,
    /// Only this stream id (a run id, a task id, an agent name, a workflow name).
    #[arg(long, value_name = "ID")]
    stream: Option<String>,
    /// Only this event type (for example task.queued); repeatable.
    #[arg(long = "type", value_name = "EVENT_TYPE")]
    event_types: Vec<String>,
    /// Only events recorded at or after this time (RFC 3339, YYYY-MM-DD, or an age: 15m, 2h, 7d).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only events recorded before this time.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Start after this global position.
    #[arg(long, value_name = "POSITION", default_value_t = 0)]
    after: i64,
    /// Print at most this many events (not with --follow).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// One JSON object per line, with every field.
    #[arg(long)]
    json: bool,
    /// Keep printing new events as they are appended, until interrupted.
    #[arg(long, short = 'f')]
    follow: bool,
}

impl EventsArgs {
    fn filter(&self) -> anyhow::Result<EventFilter> {
        let now = Utc::now();
        let time = |t: &Option<String>, flag: &str| {
            t.as_deref()
                .map(|t| parse_time(t, now).map_err(|e| anyhow::anyhow!("--{flag}: {e}")))
                .transpose()
        };
        Ok(EventFilter {
            stream_types: self.stream_types.clone(),
            stream_id: self.stream.clone(),
            event_types: self.event_types.clone(),
            since: time(&self.since, "since")?,
            until: time(&self.until, "until")?,
        })
    }
}

pub async fn run(store: &EventStore, args: EventsArgs) -> anyhow::Result<()> {
    let filter = args.filter()?;
    if args.follow && args.limit.is_some() {
        anyhow::bail!("--limit cannot be combined with --follow");
    }
    let stdout = std::io::stdout();
    let mut printed = 0usize;
    if args.follow {
        let mut tail = std::pin::pin!(store.tail(args.after, filter));
        let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            tokio::select! {
                next = tail.next() => match next {
                    Some(event) => {
                        print(&mut stdout.lock(), &event?, args.json)?;
                        stdout.lock().flush().context("writing to stdout")?;
                    }
                    None => return Ok(()),
                },
                _ = &mut interrupted => return Ok(()),
            }
        }
    }
    let limit = args.limit.unwrap_or(usize::MAX);
    let mut after = args.after;
    let mut out = stdout.lock();
    while printed < limit {
        let page = (limit - printed).min(crate::store::TAIL_PAGE as usize) as i64;
        let (events, scanned) = store.read_page(after, page, &filter).await?;
        for event in &events {
            print(&mut out, event, args.json)?;
        }
        printed += events.len();
        if scanned == after {
            break;
        }
        after = scanned;
    }
    if printed == 0 && !args.json {
        eprintln!("no events{}", if filter.is_empty() { "" } else { " match" });
    }
    Ok(())
}

fn print(out: &mut impl Write, event: &RecordedEvent, json: bool) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, event).context("writing JSON")?;
        writeln!(out).context("writing to stdout")?;
        return Ok(());
    }
    let actor = event
        .metadata
        .actor
        .as_deref()
        .map(|a| format!(" by {a}"))
        .unwrap_or_default();
    writeln!(
        out,
        "{:>8}  {}  {}#{}  {} v{}{}  {}",
        event.position,
        event
            .recorded_at
            .to_rfc3339_opts(SecondsFormat::Millis, true),
        event.stream,
        event.version,
        event.event_type,
        event.event_version,
        actor,
        event.payload
    )
    .context("writing to stdout")
}
