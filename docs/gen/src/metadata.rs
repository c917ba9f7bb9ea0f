//! The annotations and labels page, from the operator's table
//! (`baton_operator::metadata_keys::OPERATOR_KEYS`) and the sidecar's
//! (`baton_sidecar::pod::POD_KEYS`); [`literal_keys`] finds every `"baton.dev/..."` literal in
//! the code, so the drift test can check both tables hold them all.

use std::path::Path;

use baton_operator::metadata_keys::OPERATOR_KEYS;
use baton_sidecar::pod::POD_KEYS;

use crate::markdown::{cell, code, header, table};

/// The page.
pub fn page() -> String {
    let mut out = header(
        "Annotations and labels",
        "the key tables in operator/src/metadata_keys.rs and sidecar/src/pod/mod.rs",
    );
    out.push_str(
        "Every `baton.dev/*` key Baton reads or writes. The ones you set are read by the \
         injection webhook when a pod is created (a change to a running pod does nothing until \
         it is re-created); see [Inject the sidecar](../tasks/inject.md).\n\n\
         ## Set by you, or by the operator\n\n",
    );
    let rows: Vec<Vec<String>> = OPERATOR_KEYS
        .iter()
        .map(|k| {
            vec![
                code(k.key),
                k.kind.as_str().into(),
                cell(k.on),
                cell(k.set_by),
                cell(k.read_by),
                cell(k.values),
                cell(k.meaning),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "key", "kind", "on", "set by", "read by", "values", "meaning",
        ],
        &rows,
    ));
    out.push_str(
        "\n## Written by the sidecar\n\n\
         The sidecar patches its own pod (a JSON merge patch, field manager `baton-sidecar`; \
         RBAC `patch` on pods). Keys marked *per election* are the plain key for the first \
         `--election` and `KEY-ELECTION` for each later one (when that is a valid key).\n\n",
    );
    let rows: Vec<Vec<String>> = POD_KEYS
        .iter()
        .map(|k| {
            let mut meaning = cell(k.meaning);
            if k.per_election {
                meaning.push_str(" *Per election.*");
            }
            vec![
                code(k.key),
                k.kind.into(),
                cell(k.on),
                cell(k.values),
                meaning,
            ]
        })
        .collect();
    out.push_str(&table(&["key", "kind", "on", "values", "meaning"], &rows));
    out
}

/// Every key the tables document (per-election keys also as prefixes, `KEY-`).
pub fn documented(key: &str) -> bool {
    OPERATOR_KEYS.iter().any(|k| k.key == key)
        || POD_KEYS.iter().any(|k| {
            k.key == key
                || (k.per_election
                    && key
                        .strip_prefix(k.key)
                        .is_some_and(|rest| rest.starts_with('-')))
        })
}

/// Every `"baton.dev/KEY` literal in the `.rs` files under `dirs` (the API group
/// `baton.dev/v1alpha1` aside), with the file it is in.
pub fn literal_keys(dirs: &[&Path]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (i, _) in text.match_indices("\"baton.dev/") {
                let rest = &text[i + "\"baton.dev/".len()..];
                let key: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
                    .collect();
                if !key.starts_with(|c: char| c.is_ascii_alphanumeric()) || key.starts_with("v1") {
                    continue;
                }
                found.push((format!("baton.dev/{key}"), path.display().to_string()));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}
