//! Every field of the `CoordinationEnsemble` CRD, from the schema the operator generates (the one
//! `crds/` holds and the API server validates with).

use kube::CustomResourceExt;
use serde_json::Value;

use crate::markdown::{cell, code, header, paragraphs, table};

/// The CRD page: one table for `spec`, one for `status`.
pub fn page() -> Result<String, String> {
    let crd = baton_operator::crd::CoordinationEnsemble::crd();
    let crd = serde_json::to_value(&crd).map_err(|e| format!("serialize the CRD: {e}"))?;
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    let mut out = header(
        "CoordinationEnsemble fields",
        "the CRD schema operator/src/crd.rs generates (crds/coordinationensembles.baton.dev.yaml)",
    );
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for version in versions {
        let name = version["name"].as_str().unwrap_or_default();
        let schema = &version["schema"]["openAPIV3Schema"];
        out.push_str(&format!("`apiVersion: {group}/{name}`, `kind: {kind}`"));
        if let Some(short) = crd["spec"]["names"]["shortNames"].as_array() {
            let short: Vec<String> = short
                .iter()
                .filter_map(Value::as_str)
                .map(|s| format!("`{s}`"))
                .collect();
            out.push_str(&format!(" (short name {})", short.join(", ")));
        }
        out.push_str(". ");
        out.push_str(&paragraphs(
            schema["description"].as_str().unwrap_or_default(),
        ));
        out.push_str(
            "\n\nA field's type is its OpenAPI type (`format` in parentheses); `?` marks a field \
             that may be `null`. Limits are what the API server enforces; the operator checks \
             more when it reconciles (the ensemble's `Ready` condition and events say what it \
             refused). Descriptions of fields taken from Kubernetes' own types are cut to their \
             first paragraph.\n\n",
        );
        for part in ["spec", "status"] {
            let Some(root) = schema["properties"].get(part) else {
                continue;
            };
            out.push_str(&format!("## `{part}`\n\n"));
            let about = root["description"].as_str().unwrap_or_default();
            if !about.is_empty() {
                out.push_str(&paragraphs(about));
                out.push_str("\n\n");
            }
            let mut rows = Vec::new();
            fields(root, part, &mut rows);
            out.push_str(&table(
                &["field", "type", "default", "limits", "meaning"],
                &rows,
            ));
            out.push('\n');
        }
        if let Some(columns) = version["additionalPrinterColumns"].as_array() {
            out.push_str("## `kubectl get` columns\n\n");
            let rows: Vec<Vec<String>> = columns
                .iter()
                .map(|c| {
                    vec![
                        code(c["name"].as_str().unwrap_or_default()),
                        code(c["jsonPath"].as_str().unwrap_or_default()),
                        cell(c["description"].as_str().unwrap_or_default()),
                    ]
                })
                .collect();
            out.push_str(&table(&["column", "JSONPath", "meaning"], &rows));
            out.push('\n');
        }
    }
    Ok(out)
}

/// One row per property under `schema` (named `path`), depth first, in the schema's order.
fn fields(schema: &Value, path: &str, rows: &mut Vec<Vec<String>>) {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    for (name, field) in properties {
        let field_path = format!("{path}.{name}");
        let mut limits = limits(field);
        if required.contains(&name.as_str()) {
            limits.insert(0, "required".into());
        }
        rows.push(vec![
            code(&field_path),
            type_of(field),
            field
                .get("default")
                .map(|d| code(&d.to_string()))
                .unwrap_or_default(),
            cell(&limits.join("; ")),
            cell(first_paragraph(
                field["description"].as_str().unwrap_or_default(),
            )),
        ]);
        fields(field, &field_path, rows);
        let items = &field["items"];
        if items.is_object() {
            fields(items, &format!("{field_path}[]"), rows);
        }
        let values = &field["additionalProperties"];
        if values.is_object() {
            fields(values, &format!("{field_path}.*"), rows);
        }
    }
}

/// A Kubernetes type's description runs to pages; its first paragraph says what it is.
fn first_paragraph(text: &str) -> &str {
    text.split("\n\n").next().unwrap_or_default()
}

fn type_of(field: &Value) -> String {
    let mut t = match field["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&field["items"])),
        Some("object") if field["additionalProperties"].is_object() => {
            format!("map of {}", type_of(&field["additionalProperties"]))
        }
        Some(t) => t.to_string(),
        None if field["x-kubernetes-int-or-string"] == Value::Bool(true) => {
            "integer or string".into()
        }
        None => "any".into(),
    };
    if let Some(format) = field["format"].as_str() {
        t.push_str(&format!(" ({format})"));
    }
    if field["nullable"] == Value::Bool(true) {
        t.push('?');
    }
    t
}

fn limits(field: &Value) -> Vec<String> {
    let number = |v: &Value| match v.as_f64() {
        Some(f) if f.fract() == 0.0 => format!("{}", f as i64),
        Some(f) => format!("{f}"),
        None => v.to_string(),
    };
    let mut out = Vec::new();
    match (field.get("minimum"), field.get("maximum")) {
        (Some(min), Some(max)) => out.push(format!("{} to {}", number(min), number(max))),
        (Some(min), None) => out.push(format!("at least {}", number(min))),
        (None, Some(max)) => out.push(format!("at most {}", number(max))),
        (None, None) => {}
    }
    match (field.get("minLength"), field.get("maxLength")) {
        (Some(min), Some(max)) => {
            out.push(format!("{} to {} characters", number(min), number(max)))
        }
        (None, Some(max)) => out.push(format!("at most {} characters", number(max))),
        (Some(min), None) => out.push(format!("at least {} characters", number(min))),
        (None, None) => {}
    }
    if let Some(max) = field.get("maxItems") {
        out.push(format!("at most {} items", number(max)));
    }
    if let Some(max) = field.get("maxProperties") {
        out.push(format!("at most {} entries", number(max)));
    }
    if let Some(values) = field["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(pattern) = field["pattern"].as_str() {
        out.push(format!("matches `{pattern}`"));
    }
    if let Some(rules) = field["x-kubernetes-validations"].as_array() {
        for rule in rules {
            if let Some(message) = rule["message"].as_str() {
                out.push(message.to_string());
            }
        }
    }
    out
}
