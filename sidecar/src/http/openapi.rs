//! The OpenAPI 3.1 document of the localhost API, made from the API's table ([`super::api`]) and
//! the error codes ([`ErrorCode`]): what `GET /openapi.json` answers and what `cargo run -p
//! baton-docs` writes to `docs/src/reference/sidecar-openapi.json`.
//!
//! Beyond standard OpenAPI, for the client libraries' contract tests:
//! - a duration parameter is `{type: string, format: duration}` with its default and limits
//!   both as text (`default`, `x-baton-minimum`, `x-baton-maximum`: `10s`) and in
//!   milliseconds (`x-baton-default-ms`, `x-baton-minimum-ms`, `x-baton-maximum-ms`);
//! - every parameter names the error code of a bad value (`x-baton-invalid`) and, when
//!   required, of a missing one (`x-baton-missing`);
//! - every error response lists its codes (`x-baton-error-codes`); `x-baton-error-codes` at the
//!   top lists all of them with status and meaning;
//! - an event-stream answer lists its events (`x-baton-events`: name, schema, description);
//! - `x-baton-probe: true` marks operations also served on `--probe-listen`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::api::{Content, ENDPOINTS, Endpoint, Param, ParamKind, SCHEMAS};
use super::error_code::ErrorCode;

/// The words a schema field's type may be besides another schema's name.
fn field_schema(ty: &str) -> Value {
    let ty = ty.trim_start_matches('~');
    let (ty, nullable) = match ty.strip_suffix('?') {
        Some(inner) => (inner, true),
        None => (ty, false),
    };
    let base = if let Some(item) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        json!({ "type": "array", "items": field_schema(item) })
    } else {
        match ty {
            "string" => json!({ "type": "string" }),
            "integer" => json!({ "type": "integer", "format": "int64" }),
            "boolean" => json!({ "type": "boolean" }),
            "date-time" => json!({ "type": "string", "format": "date-time" }),
            "state" => json!({ "type": "string", "enum": ["CONNECTED", "SUSPENDED", "LOST"] }),
            "mode" => json!({ "type": "string", "enum": ["exclusive", "read", "write", "permit"] }),
            "hold" => json!({ "type": "string", "enum": ["lease", "stream"] }),
            name => json!({ "$ref": format!("#/components/schemas/{name}") }),
        }
    };
    if !nullable {
        return base;
    }
    match base.get("type").cloned() {
        Some(Value::String(t)) => {
            let mut s = base.clone();
            s["type"] = json!([t, "null"]);
            if let Some(values) = s.get_mut("enum").and_then(Value::as_array_mut) {
                values.push(Value::Null);
            }
            s
        }
        _ => json!({ "oneOf": [base, { "type": "null" }] }),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn param(p: &Param) -> Value {
    let schema = match p.kind {
        ParamKind::Duration { default, min, max } => {
            let mut s = json!({
                "type": "string",
                "format": "duration",
                "x-baton-minimum": baton_duration::format(min),
                "x-baton-maximum": baton_duration::format(max),
                "x-baton-minimum-ms": ms(min),
                "x-baton-maximum-ms": ms(max),
            });
            if let Some(d) = default {
                s["default"] = json!(baton_duration::format(d));
                s["x-baton-default-ms"] = json!(ms(d));
            }
            s
        }
        ParamKind::Count { min, max } => {
            json!({ "type": "integer", "format": "int32", "minimum": min, "maximum": max })
        }
        ParamKind::Token => json!({ "type": "integer", "format": "int64" }),
        ParamKind::Choice(words) => {
            let mut s = json!({ "type": "string", "enum": words });
            if !p.required && words.len() > 1 {
                s["default"] = json!(words[0]);
            }
            s
        }
        ParamKind::Text => json!({ "type": "string" }),
    };
    let mut out = json!({
        "name": p.name,
        "in": "query",
        "required": p.required,
        "description": p.doc,
        "schema": schema,
        "x-baton-invalid": p.invalid.as_str(),
    });
    if let Some(missing) = p.missing {
        out["x-baton-missing"] = json!(missing.as_str());
    }
    out
}

fn operation(e: &Endpoint, with_name: bool) -> Value {
    let mut parameters = Vec::new();
    if with_name {
        parameters.push(json!({
            "name": "name",
            "in": "path",
            "required": true,
            "description": "The election, lock, semaphore or barrier name (refused with 400 \
                            `InvalidName` when it is not a valid name).",
            "schema": { "type": "string" },
        }));
    }
    parameters.extend(e.params.iter().map(param));

    let mut responses = serde_json::Map::new();
    let mut ok: BTreeMap<u16, (Vec<String>, serde_json::Map<String, Value>)> = BTreeMap::new();
    for a in e.answers {
        let (docs, content) = ok.entry(a.status).or_default();
        docs.push(a.doc.to_owned());
        match a.content {
            Content::Json(name) => {
                content.insert(
                    "application/json".into(),
                    json!({ "schema": { "$ref": format!("#/components/schemas/{name}") } }),
                );
            }
            Content::EventStream(events) => {
                let events: Vec<Value> = events
                    .iter()
                    .map(|ev| {
                        json!({
                            "name": ev.name,
                            "schema": { "$ref": format!("#/components/schemas/{}", ev.schema) },
                            "description": ev.doc,
                        })
                    })
                    .collect();
                content.insert(
                    "text/event-stream".into(),
                    json!({ "schema": { "type": "string" }, "x-baton-events": events }),
                );
            }
            Content::AnyJson => {
                content.insert(
                    "application/json".into(),
                    json!({ "schema": { "type": "object" } }),
                );
            }
            Content::OpenMetrics => {
                content.insert(
                    "application/openmetrics-text".into(),
                    json!({ "schema": { "type": "string" } }),
                );
            }
        }
    }
    for (status, (docs, content)) in ok {
        responses.insert(
            status.to_string(),
            json!({ "description": docs.join(" "), "content": content }),
        );
    }
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in e.all_errors() {
        by_status
            .entry(code.status().as_u16())
            .or_default()
            .push(code);
    }
    for (status, codes) in by_status {
        let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        responses.insert(
            status.to_string(),
            json!({
                "description": names.join(", "),
                "content": { "application/json": {
                    "schema": { "$ref": "#/components/schemas/Error" }
                } },
                "x-baton-error-codes": names,
            }),
        );
    }

    let operation_id = if with_name || !e.default_name {
        e.id.to_owned()
    } else {
        format!("{}_default", e.id)
    };
    let mut op = json!({
        "operationId": operation_id,
        "summary": e.summary,
        "description": e.doc,
        "parameters": parameters,
        "responses": responses,
    });
    if e.probe {
        op["x-baton-probe"] = json!(true);
    }
    op
}

/// The OpenAPI document.
pub fn document() -> Value {
    let mut paths: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for e in ENDPOINTS {
        let method = e.method.to_ascii_lowercase();
        let named = e.path.contains("{name}");
        paths
            .entry(e.path.to_owned())
            .or_default()
            .insert(method.clone(), operation(e, named));
        if e.default_name {
            paths
                .entry(e.path.replace("/{name}", ""))
                .or_default()
                .insert(method, operation(e, false));
        }
    }

    let mut schemas = serde_json::Map::new();
    for s in SCHEMAS {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for field in s.fields {
            let mut schema = field_schema(field.ty);
            if !field.doc.is_empty() {
                schema = match schema {
                    Value::Object(mut o) if !o.contains_key("$ref") => {
                        o.insert("description".into(), json!(field.doc));
                        Value::Object(o)
                    }
                    other => json!({ "allOf": [other], "description": field.doc }),
                };
            }
            properties.insert(field.name.into(), schema);
            if !field.ty.starts_with('~') {
                required.push(field.name);
            }
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
        });
        if !s.doc.is_empty() {
            schema["description"] = json!(s.doc);
        }
        schemas.insert(s.name.into(), schema);
    }
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    if let Some(code) = schemas
        .get_mut("ErrorBody")
        .and_then(|s| s.pointer_mut("/properties/code"))
    {
        code["enum"] = json!(codes);
    }
    let all_codes: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| {
            json!({ "code": c.as_str(), "status": c.status().as_u16(), "meaning": c.meaning() })
        })
        .collect();

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Baton sidecar API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The localhost HTTP API of baton-sidecar (`--listen`). Parameters go \
                            in the query string; a parameter an operation does not list is \
                            refused (400 `UnknownParameter`), never ignored. Every error is \
                            `{\"error\": {\"code\", \"message\"}}`, each code with one status. \
                            Generated from the sidecar's route table; do not edit.",
        },
        "servers": [{ "url": "http://127.0.0.1:4040" }],
        "paths": paths,
        "components": { "schemas": schemas },
        "x-baton-error-codes": all_codes,
    })
}

/// The document as committed: pretty JSON with a final newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_and_code_is_in_the_document() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().expect("paths");
        for e in ENDPOINTS {
            let op = &paths[e.path][e.method.to_ascii_lowercase().as_str()];
            assert_eq!(op["operationId"], e.id);
        }
        assert_eq!(
            doc["x-baton-error-codes"].as_array().map(Vec::len),
            Some(ErrorCode::ALL.len())
        );
        let wait = &paths["/lock/{name}"]["post"]["parameters"][1];
        assert_eq!(wait["name"], "wait");
        assert_eq!(wait["schema"]["default"], "10s");
        assert_eq!(wait["schema"]["x-baton-maximum-ms"], 600_000);
    }
}
