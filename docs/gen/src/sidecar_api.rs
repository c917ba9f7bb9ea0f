//! The sidecar's HTTP API: its routes (from the table `baton_sidecar::http::api`, which the
//! handlers take their parameters from), its OpenAPI document (made from the same table) and its
//! error codes (from `baton_sidecar::http::ErrorCode`, what the handlers answer with).

use baton_sidecar::http::ErrorCode;
use baton_sidecar::http::api::{
    COMMON_ERRORS, Content, ENDPOINTS, Endpoint, Param, ParamKind, SCHEMAS, schema,
};

use crate::markdown::{cell, code, header, paragraphs, table};

/// The error codes page.
pub fn errors_page() -> String {
    let mut out = header(
        "Sidecar API error codes",
        "the ErrorCode list in sidecar/src/http/error_code.rs",
    );
    out.push_str(&format!(
        "Every error the sidecar's HTTP API answers is JSON, \
         `{{\"error\": {{\"code\": \"...\", \"message\": \"...\"}}}}`: the code is stable and meant \
         for programs, the message is for people and may change. Each code always comes with the \
         same HTTP status. {} codes.\n\n",
        ErrorCode::ALL.len()
    ));
    let rows: Vec<Vec<String>> = ErrorCode::ALL
        .iter()
        .map(|c| {
            let status = c.status();
            vec![
                code(c.as_str()),
                format!(
                    "{} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or_default()
                ),
                cell(c.meaning()),
            ]
        })
        .collect();
    out.push_str(&table(&["code", "status", "meaning"], &rows));
    out
}

/// The OpenAPI document, as committed next to the pages.
pub fn openapi_document() -> String {
    baton_sidecar::http::openapi::document_text()
}

fn duration(d: std::time::Duration) -> String {
    baton_duration::format(d)
}

/// A parameter's type, default and limits, in words.
fn param_cells(p: &Param) -> (String, String, String) {
    match p.kind {
        ParamKind::Duration { default, min, max } => (
            "duration".into(),
            default.map_or("none".into(), |d| code(&duration(d))),
            format!("{} to {}", code(&duration(min)), code(&duration(max))),
        ),
        ParamKind::Count { min, max } => {
            ("integer".into(), "none".into(), format!("{min} to {max}"))
        }
        ParamKind::Token => ("integer (64-bit)".into(), "none".into(), String::new()),
        ParamKind::Choice(words) => (
            words.iter().map(|w| code(w)).collect::<Vec<_>>().join(", "),
            if p.required || words.len() == 1 {
                "none".into()
            } else {
                code(words[0])
            },
            String::new(),
        ),
        ParamKind::Text => ("text".into(), "none".into(), String::new()),
    }
}

fn schema_link(name: &str) -> String {
    format!("[`{name}`](#{})", name.to_ascii_lowercase())
}

fn content_words(content: &Content) -> String {
    match content {
        Content::Json(name) => format!("JSON {}", schema_link(name)),
        Content::EventStream(_) => "`text/event-stream`".into(),
        Content::OpenMetrics => "OpenMetrics text".into(),
        Content::AnyJson => "JSON".into(),
    }
}

/// The routes page: every endpoint with its parameters, answers and error codes, then the
/// JSON objects.
pub fn routes_page() -> String {
    let mut out = header(
        "Sidecar HTTP API",
        "the route table in sidecar/src/http/api.rs and the ErrorCode list",
    );
    out.push_str(
        "The sidecar's localhost API (`--listen`, `127.0.0.1:4040` when injected). Parameters go \
         in the query string; one an endpoint does not list is refused (400 \
         `UnknownParameter`), never ignored, and so is one given twice. Durations are written \
         `500ms`, `30s`, `1m30s`. Every error is JSON `{\"error\": {\"code\", \"message\"}}`; \
         the codes and their statuses are in [Sidecar API error codes](sidecar-errors.md).\n\n\
         The same table is this API's OpenAPI 3.1 document, \
         [`sidecar-openapi.json`](sidecar-openapi.json), which a running sidecar also answers at \
         `GET /openapi.json`; the client libraries are checked against it. The handlers take their \
         parameters, defaults and limits from the table, and the sidecar's tests hold every \
         answer and event they receive to it.\n\n",
    );
    out.push_str(&format!(
        "Every endpoint can also answer {}: the router's and the query parser's refusals \
         (`InvalidName` only where the path has a name). The endpoints marked *also on the probe port* are \
         served on `--probe-listen` too; everything else is 403 `ProbePortReadOnly` there.\n\n",
        COMMON_ERRORS
            .iter()
            .map(|c| code(c.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str("## Endpoints\n\n");
    let rows: Vec<Vec<String>> = ENDPOINTS
        .iter()
        .map(|e| {
            vec![
                code(&format!("{} {}", e.method, display_path(e))),
                cell(e.summary),
            ]
        })
        .collect();
    out.push_str(&table(&["endpoint", "what it does"], &rows));
    out.push('\n');
    for e in ENDPOINTS {
        out.push_str(&format!("### {} {}\n\n", e.method, display_path(e)));
        out.push_str(&format!("{}.", e.summary));
        if e.probe {
            out.push_str(" *Also on the probe port.*");
        }
        out.push_str(&format!(" {}\n\n", paragraphs(e.doc)));
        if e.default_name {
            out.push_str(&format!(
                "Without `/{{name}}`: the sidecar's first `--election`. The route's metric label is \
                 `{}`.\n\n",
                e.id
            ));
        } else {
            out.push_str(&format!("The route's metric label is `{}`.\n\n", e.id));
        }
        if !e.params.is_empty() {
            let rows: Vec<Vec<String>> = e
                .params
                .iter()
                .map(|p| {
                    let (ty, default, limits) = param_cells(p);
                    let mut refused = code(p.invalid.as_str());
                    if let Some(m) = p.missing {
                        refused = format!("{refused}; missing: {}", code(m.as_str()));
                    }
                    vec![
                        code(p.name),
                        ty,
                        if p.required {
                            "required".into()
                        } else {
                            default
                        },
                        limits,
                        refused,
                        cell(p.doc),
                    ]
                })
                .collect();
            out.push_str(&table(
                &[
                    "parameter",
                    "type",
                    "default",
                    "limits",
                    "refused with",
                    "meaning",
                ],
                &rows,
            ));
            out.push('\n');
        }
        for a in e.answers {
            out.push_str(&format!(
                "- **{}** {}: {}\n",
                a.status,
                content_words(&a.content),
                cell(a.doc)
            ));
            if let Content::EventStream(events) = a.content {
                for ev in events {
                    out.push_str(&format!(
                        "  - `event: {}` {}: {}\n",
                        ev.name,
                        schema_link(ev.schema),
                        cell(ev.doc)
                    ));
                }
            }
        }
        let own: Vec<String> = e
            .errors
            .iter()
            .map(|c| format!("{} {}", c.status().as_u16(), code(c.as_str())))
            .collect();
        if !own.is_empty() {
            out.push_str(&format!(
                "- **Errors** (besides the common ones): {}\n",
                own.join(", ")
            ));
        }
        out.push('\n');
    }
    out.push_str(
        "## JSON objects\n\n`?` after a type: may be `null`; *optional*: may be absent. \
         Timestamps are RFC 3339 text; `state` is `CONNECTED`, `SUSPENDED` or `LOST`.\n\n",
    );
    for s in SCHEMAS {
        out.push_str(&format!("### {}\n\n", s.name));
        if !s.doc.is_empty() {
            out.push_str(&format!("{}\n\n", paragraphs(s.doc)));
        }
        let rows: Vec<Vec<String>> = s
            .fields
            .iter()
            .map(|f| {
                let optional = f.ty.starts_with('~');
                let ty = f.ty.trim_start_matches('~');
                let (bare, nullable) = match ty.strip_suffix('?') {
                    Some(t) => (t, "?"),
                    None => (ty, ""),
                };
                let inner = bare.trim_start_matches('[').trim_end_matches(']');
                let shown = if schema(inner).is_some() {
                    let link = schema_link(inner);
                    if bare.starts_with('[') {
                        format!("[{link}]{nullable}")
                    } else {
                        format!("{link}{nullable}")
                    }
                } else {
                    code(&format!("{bare}{nullable}"))
                };
                vec![
                    code(f.name),
                    shown,
                    if optional {
                        "optional".into()
                    } else {
                        String::new()
                    },
                    cell(f.doc),
                ]
            })
            .collect();
        out.push_str(&table(&["field", "type", "", "meaning"], &rows));
        out.push('\n');
    }
    out
}

fn display_path(e: &Endpoint) -> String {
    if e.default_name {
        e.path.replace("/{name}", "[/{name}]")
    } else {
        e.path.to_owned()
    }
}
