//! Carrying a trace across processes: a span's context as a W3C `traceparent`, and a
//! span put under the trace a `traceparent` names. With no OpenTelemetry layer
//! installed, spans have no context and these do nothing.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `traceparent` of `span`, if it is part of an exported trace (written as the
/// W3C propagator writes it, without its map and allocations: every command asks).
pub fn traceparent_of(span: &Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    Some(format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        (sc.trace_flags() & opentelemetry::trace::TraceFlags::SAMPLED).to_u8()
    ))
}

/// The span of a board operation on a task, when it needs one of its own: outside any
/// span (the sweeper requeueing a task), a span named `op`. Inside a span (the HTTP
/// request or MCP tool call that asked for it) none: the operation is that span's,
/// and [`task_done`] names it there once it happened (a child span per operation
/// doubled the spans on the dispatch path).
pub fn task_span(op: &'static str, task_id: &str) -> Option<Span> {
    Span::current().is_none().then(|| {
        tracing::info_span!(
            "awl.task",
            otel.name = op,
            awl.task.id = %task_id,
        )
    })
}

/// Name on the current span (the request's) the operation it carried out:
/// `awl.task.operation` and `awl.task.id`. Only for an operation that happened: one
/// refused on the way (a reservation another agent won first) leaves the request's
/// span as the request's outcome says, not failed.
pub fn task_done(op: &'static str, task_id: &str) {
    let current = Span::current();
    current.set_attribute("awl.task.operation", op);
    current.set_attribute("awl.task.id", task_id.to_string());
}

/// Mark `span` failed with an error code (`error.type`, status ERROR).
pub fn span_failed(span: &Span, code: &'static str) {
    span.set_attribute("error.type", code);
    span.set_status(opentelemetry::trace::Status::error(code));
}

/// The `traceparent` of the current span.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// A trace to put spans under, parsed once from a `traceparent` (a run's, read when a
/// worker claims it, serves every step of the run).
#[derive(Clone, Default)]
pub struct Parent(Option<Context>);

impl Parent {
    /// The trace `traceparent` names; none when it is absent or malformed.
    pub fn parse(traceparent: Option<&str>) -> Self {
        let Some(value) = traceparent else {
            return Self(None);
        };
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_string(), value.to_string());
        let cx = TraceContextPropagator::new().extract(&carrier);
        Self(cx.span().span_context().is_valid().then_some(cx))
    }

    /// Put `span` (not yet entered) under this trace.
    pub fn adopt(&self, span: &Span) {
        if let Some(cx) = &self.0 {
            let _ = span.set_parent(cx.clone());
        }
    }
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Parent(trace)"
        } else {
            "Parent(none)"
        })
    }
}

/// Put `span` (not yet entered) under the trace `traceparent` names. A malformed
/// value is ignored: the span starts a trace of its own.
pub fn set_parent(span: &Span, traceparent: Option<&str>) {
    Parent::parse(traceparent).adopt(span);
}

/// The headers that carry `span`'s trace to another service (`traceparent`, and
/// `tracestate` when there is one).
pub fn propagation_headers(span: &Span) -> Vec<(String, String)> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    let mut headers: Vec<(String, String)> = carrier.into_iter().collect();
    headers.sort();
    headers
}
