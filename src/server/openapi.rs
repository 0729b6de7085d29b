//! The OpenAPI document, generated from the route table (`routes.rs`) and the JSON
//! Schemas of the request and response shapes, so it cannot drift from what the
//! server serves and checks.

use axum::http::Method;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::auth::Permission;

use super::error::ErrorBody;
use super::routes::RouteSpec;

/// The OpenAPI 3.0 document (schemars' openapi3 settings) of `routes`.
pub fn document(routes: &[RouteSpec]) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths: Map<String, Value> = Map::new();
    for route in routes {
        let mut op = Map::new();
        op.insert("summary".into(), json!(route.summary));
        op.insert("tags".into(), json!([route.tag]));
        op.insert("operationId".into(), json!(operation_id(route)));
        let mut params: Vec<Value> = path_params(route.path)
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        params.extend(route.query.iter().map(|(name, description)| {
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": "string"}})
        }));
        if route.idempotent {
            params.push(json!({"name": "Idempotency-Key", "in": "header", "required": false,
                "description": "Repeat the call safely: the same key from the same caller returns the first result (200 instead of 201).",
                "schema": {"type": "string"}}));
        }
        if !params.is_empty() {
            op.insert("parameters".into(), Value::Array(params));
        }
        if let Some(request) = route.request {
            let schema = request(&mut generator);
            op.insert(
                "requestBody".into(),
                json!({"required": false, "content": {"application/json": {"schema": schema}}}),
            );
        }
        let mut responses = Map::new();
        let ok = match route.response {
            Some(response) => {
                json!({"description": "OK", "content": {"application/json": {"schema": response(&mut generator)}}})
            }
            None => json!({"description": "OK"}),
        };
        responses.insert(route.success.to_string(), ok);
        let error = generator.subschema_for::<ErrorBody>();
        for (code, what) in error_statuses(route) {
            responses.insert(
                code.to_string(),
                json!({"description": what, "content": {"application/json": {"schema": error}}}),
            );
        }
        op.insert("responses".into(), Value::Object(responses));
        if route.permission != Permission::Public {
            op.insert("security".into(), json!([{"bearer": []}]));
            op.insert("x-awl-permission".into(), json!(route.permission));
        }
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.as_str().to_lowercase()] = Value::Object(op);
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "awl",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The agent board, runs and gates of awl. Bearer tokens carry a role: viewer (read), operator (send, answer, review, runs, gates), agent (its own tasks), admin (everything, tokens)."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

fn operation_id(route: &RouteSpec) -> String {
    let api = route.path.strip_prefix("/api/v1");
    let mut words: Vec<String> = api
        .unwrap_or(route.path)
        .split('/')
        .filter(|p| !p.is_empty())
        .map(
            |p| match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(param) => format!("by_{param}"),
                None => p.replace(['-', '.'], "_"),
            },
        )
        .collect();
    if api.is_none() {
        words.insert(0, "root".into());
    }
    format!(
        "{}_{}",
        route.method.as_str().to_lowercase(),
        words.join("_")
    )
}

fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|p| p.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
}

fn error_statuses(route: &RouteSpec) -> Vec<(u16, &'static str)> {
    let mut out = Vec::new();
    if route.permission != Permission::Public {
        out.push((401, "No valid bearer token"));
        out.push((403, "The token's role may not do this"));
    }
    if route.request.is_some() {
        out.push((400, "The body is not JSON"));
        out.push((413, "The body is too large"));
        out.push((422, "The body or a value is invalid"));
    }
    if route.path.contains('{') {
        out.push((404, "Not found"));
    }
    if route.method == Method::POST && route.permission != Permission::Public {
        out.push((
            409,
            "Not allowed in the current state (nothing was recorded)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::server::routes::routes;

    fn refs(value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.insert(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_document_lists_every_route_and_every_reference_resolves() {
        let routes = routes();
        let doc = document(&routes);
        for route in &routes {
            let op = &doc["paths"][route.path][route.method.as_str().to_lowercase()];
            assert!(op.is_object(), "{} {} is missing", route.method, route.path);
            assert_eq!(op["summary"], route.summary);
        }
        let mut found = BTreeSet::new();
        refs(&doc, &mut found);
        assert!(found.len() > 10, "{found:?}");
        for r in found {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("odd ref {r}"));
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{r} does not resolve"
            );
        }
        let ids: BTreeSet<String> = routes.iter().map(operation_id).collect();
        assert_eq!(ids.len(), routes.len(), "operation ids are unique");
    }

    #[test]
    fn requests_refuse_unknown_fields_in_the_schema_too() {
        let doc = document(&routes());
        let send = &doc["components"]["schemas"]["SendTaskRequest"];
        assert_eq!(send["additionalProperties"], false);
        assert_eq!(send["required"], json!(["prompt"]));
    }
}
