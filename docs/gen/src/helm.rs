//! Every value of the Helm chart, from `charts/baton/values.yaml` and the comments above (or
//! beside) each key. The file is read as the chart's authors write it: two-space indents, block
//! maps, flow style (`{}`, `[]`) for defaults; a comment line indented past `#   ` is an example
//! of the key above it. Every value needs a comment: the page is what users read instead.

use std::path::Path;

use crate::markdown::{cell, code, header, table};

struct Value {
    path: String,
    default: String,
    comment: Vec<String>,
    example: Vec<String>,
}

/// The Helm values page.
pub fn page(values_yaml: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(values_yaml)
        .map_err(|e| format!("read {}: {e}", values_yaml.display()))?;
    let values = parse(&text)?;
    let unexplained: Vec<&str> = values
        .iter()
        .filter(|v| v.comment.is_empty())
        .map(|v| v.path.as_str())
        .collect();
    if !unexplained.is_empty() {
        return Err(format!(
            "{} has values with no comment to say what they do: {}",
            values_yaml.display(),
            unexplained.join(", ")
        ));
    }
    let mut out = header("Helm values", "charts/baton/values.yaml and its comments");
    out.push_str(
        "The values of the `baton` chart (`charts/baton`), with their defaults: set them with \
         `--set KEY=VALUE` or `-f my-values.yaml`. A key with no default shown is a map whose \
         keys are listed below it.\n\n",
    );
    let rows: Vec<Vec<String>> = values
        .iter()
        .map(|v| {
            let mut meaning = cell(&v.comment.join(" "));
            if !v.example.is_empty() {
                let example = v
                    .example
                    .iter()
                    .map(|l| l.trim())
                    .collect::<Vec<_>>()
                    .join(" ");
                meaning.push_str(&format!(" Example: {}", code(&example)));
            }
            vec![code(&v.path), v.default.clone(), meaning.trim().to_string()]
        })
        .collect();
    out.push_str(&table(&["value", "default", "meaning"], &rows));
    Ok(out)
}

fn parse(text: &str) -> Result<Vec<Value>, String> {
    let mut values: Vec<Value> = Vec::new();
    // (indent, key) of the maps the current line is inside.
    let mut parents: Vec<(usize, String)> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            pending.clear();
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            if comment.starts_with("   ") {
                if let Some(last) = values.last_mut() {
                    last.example.push(comment.to_string());
                }
            } else {
                pending.push(comment.trim().to_string());
            }
            continue;
        }
        let (key, rest) = trimmed
            .split_once(':')
            .ok_or_else(|| format!("values.yaml line {}: not `key: value`", n + 1))?;
        while parents.last().is_some_and(|(i, _)| *i >= indent) {
            parents.pop();
        }
        let key = key.trim_matches('"');
        let segment = if key.contains(['.', '/']) {
            format!("[\"{key}\"]")
        } else {
            key.to_string()
        };
        let path = parents.iter().fold(String::new(), |mut p, (_, k)| {
            if !p.is_empty() && !k.starts_with('[') {
                p.push('.');
            }
            p.push_str(k);
            p
        });
        let path = if path.is_empty() {
            segment.clone()
        } else if segment.starts_with('[') {
            format!("{path}{segment}")
        } else {
            format!("{path}.{segment}")
        };
        let (value, trailing) = split_comment(rest.trim());
        let mut comment = std::mem::take(&mut pending);
        if let Some(t) = trailing {
            comment.push(t);
        }
        if value.is_empty() {
            parents.push((indent, segment));
        }
        values.push(Value {
            path,
            default: if value.is_empty() {
                String::new()
            } else {
                code(value)
            },
            comment,
            example: Vec::new(),
        });
    }
    Ok(values)
}

/// `value  # comment` split in two (a `#` inside quotes is part of the value).
fn split_comment(rest: &str) -> (&str, Option<String>) {
    let mut quote = None;
    for (i, c) in rest.char_indices() {
        match c {
            '"' | '\'' if quote == Some(c) => quote = None,
            '"' | '\'' if quote.is_none() => quote = Some(c),
            '#' if quote.is_none() && (i == 0 || rest[..i].ends_with(' ')) => {
                return (rest[..i].trim(), Some(rest[i + 1..].trim().to_string()));
            }
            _ => {}
        }
    }
    (rest, None)
}
