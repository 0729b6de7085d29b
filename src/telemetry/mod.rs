//! What awl tells the outside about itself: logs, OpenTelemetry traces and Prometheus
//! metrics, set up in one place.
//!
//! - Logs go to stderr, filtered by `AWL_LOG` (`warn` by default).
//! - Traces are exported over OTLP/HTTP when the standard variables ask for it
//!   (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, with
//!   `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` and
//!   `OTEL_TRACES_SAMPLER_ARG`, read by the SDK). Without them no OpenTelemetry layer is
//!   installed, so awl's spans cost what a disabled `tracing` span costs. `trace.rs`
//!   carries a trace across processes as a W3C `traceparent` (in HTTP headers, and in
//!   the metadata of the event that starts a run, so every worker's steps join the
//!   run's trace).
//! - Metrics are recorded through the `metrics` facade into a Prometheus recorder and
//!   rendered by `awl serve` at `/metrics`; `metrics.rs` names every metric awl keeps,
//!   with its labels, and is the only place that does.
//!
//! This module uses no other module of awl: every layer may report through it.

mod metrics;
mod trace;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

pub use metrics::*;
pub use trace::{
    Parent, current_traceparent, propagation_headers, set_parent, span_failed, task_done,
    task_span, traceparent_of,
};

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot set up the OTLP trace exporter: {0}")]
    Exporter(String),
}

/// The telemetry of this process. Dropping it (or [`Telemetry::shutdown`]) flushes
/// the spans not exported yet.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn tracing_on(&self) -> bool {
        self.tracer.is_some()
    }

    /// Export what is left and stop.
    pub fn shutdown(mut self) {
        self.flush_and_stop();
    }

    fn flush_and_stop(&mut self) {
        if let Some(provider) = self.tracer.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("awl: could not export the last spans: {e}");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush_and_stop();
    }
}

/// Whether the environment asks for traces (an OTLP endpoint is set and the SDK is
/// not disabled).
pub fn traces_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Set up logs, traces (when configured) and the metrics recorder for this process.
/// A second call in one process keeps the first set-up (logs and traces are global).
pub fn init(service_instance: &str) -> Result<Telemetry, TelemetryError> {
    metrics::install();
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::try_from_env("AWL_LOG").unwrap_or_else(|_| EnvFilter::new("warn")));
    if !traces_configured() {
        let _ = Registry::default().with(logs).try_init();
        return Ok(Telemetry { tracer: None });
    }
    let provider = tracer_provider(service_instance)?;
    let tracer = provider.tracer("awl");
    // awl's own spans, whatever AWL_LOG says; not the libraries'. Without source
    // locations, thread names and busy/idle timing: each costs on every span (the
    // timing on every poll of an instrumented future) and says little about a run.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target("awl", tracing::Level::INFO));
    let installed = Registry::default()
        .with(logs)
        .with(spans)
        .try_init()
        .is_ok();
    Ok(Telemetry {
        tracer: installed.then_some(provider),
    })
}

fn tracer_provider(service_instance: &str) -> Result<SdkTracerProvider, TelemetryError> {
    // OTLP/HTTP's default is protobuf (the specification's); the crate would default to
    // JSON because the JSON encoding is compiled in too. The variables still choose.
    let chosen = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|p| !p.trim().is_empty()));
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    if !chosen {
        builder = builder.with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    }
    let exporter = builder
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("awl");
    }
    let resource = resource
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_attribute(opentelemetry::KeyValue::new(
            "service.instance.id",
            service_instance.to_string(),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
