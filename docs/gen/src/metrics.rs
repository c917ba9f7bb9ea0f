//! Every metric family of the three programs, from their registries (`Metrics::families`), with
//! the labels of the series a fresh registry starts with (from its `/metrics` text).

use std::collections::BTreeMap;

use crate::markdown::{cell, code, header, table};

/// One family: as registered, or as the exposition shows it.
#[derive(Debug, Default)]
struct Family {
    name: String,
    kind: String,
    help: String,
    /// Label name → values seen at start (a family whose series appear with their first event
    /// shows none).
    labels: BTreeMap<String, Vec<String>>,
}

/// The metrics page: one table per program.
pub fn page() -> String {
    let mut out = header(
        "Metrics",
        "the metric registries of ensemble/server/src/metrics.rs, sidecar/src/metrics.rs and \
         operator/src/metrics.rs",
    );
    out.push_str(
        "Every metric family each program serves on `/metrics` (Prometheus text format). A \
         counter's series is named with `_total`; a histogram has `_bucket`, `_sum` and \
         `_count` series. Labels are listed with the values a series exists for from the start \
         (the others appear with their first event).\n\n",
    );
    let ensemble = baton_ensemble::metrics::Metrics::new();
    let sidecar = baton_sidecar::metrics::Metrics::new();
    let operator = baton_operator::metrics::Metrics::new();
    let programs = [
        (
            "baton-ensemble",
            "The admin port of every member (`--admin-addr`; in Kubernetes port 8080, HTTPS).",
            ensemble.families(),
            ensemble.render(),
        ),
        (
            "baton-sidecar",
            "The sidecar's `--listen` and `--probe-listen` addresses.",
            sidecar.families(),
            sidecar.render(),
        ),
        (
            "baton-operator",
            "The operator's `--metrics-addr`.",
            operator.families(),
            operator.render(),
        ),
    ];
    for (program, where_, registered, text) in programs {
        let exposed = parse(&text);
        let families: Vec<Family> = registered
            .iter()
            .map(|f| Family {
                name: f.name.clone(),
                kind: f.kind.to_string(),
                help: f.help.clone(),
                labels: exposed
                    .iter()
                    .find(|e| e.name == f.name)
                    .map(|e| e.labels.clone())
                    .unwrap_or_default(),
            })
            .collect();
        out.push_str(&format!(
            "## `{program}`\n\n{where_} {} families.\n\n",
            families.len()
        ));
        let rows: Vec<Vec<String>> = families
            .iter()
            .map(|f| {
                let name = match f.kind.as_str() {
                    "counter" => format!("{}_total", f.name),
                    _ => f.name.clone(),
                };
                let labels: Vec<String> = f
                    .labels
                    .iter()
                    .map(|(label, values)| {
                        if values.is_empty() {
                            format!("`{label}`")
                        } else {
                            let values: Vec<String> =
                                values.iter().map(|v| format!("`{v}`")).collect();
                            format!("`{label}`: {}", values.join(", "))
                        }
                    })
                    .collect();
                vec![
                    code(&name),
                    f.kind.clone(),
                    labels.join("; "),
                    cell(&sentence(&f.help)),
                ]
            })
            .collect();
        out.push_str(&table(&["metric", "type", "labels", "meaning"], &rows));
        out.push('\n');
    }
    out
}

/// `help` ending with a full stop, as the exposition writes it.
fn sentence(help: &str) -> String {
    if help.ends_with(['.', '?', '!']) {
        help.to_string()
    } else {
        format!("{help}.")
    }
}

/// The families of a text exposition, in its order.
fn parse(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.push(Family {
                name: name.to_string(),
                help: help.to_string(),
                ..Family::default()
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (families.last_mut(), rest.split_once(' ')) {
                f.kind = kind.to_string();
            }
        } else if !line.starts_with('#')
            && let (Some(f), Some((_, labels))) = (families.last_mut(), line.split_once('{'))
        {
            let labels = labels.split('}').next().unwrap_or_default();
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let Some((label, value)) = pair.split_once('=') else {
                    continue;
                };
                // A histogram's buckets are not a label of the family.
                if label == "le" {
                    continue;
                }
                let values = f.labels.entry(label.to_string()).or_default();
                let value = value.trim_matches('"').to_string();
                if !values.contains(&value) {
                    values.push(value);
                    // A family's series come out in hash order: sort them so pages are stable.
                    values.sort();
                }
            }
        }
    }
    families
}
