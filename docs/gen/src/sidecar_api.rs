//! The sidecar's HTTP API error codes, from `baton_sidecar::http::ErrorCode` (what the handlers
//! answer with).

use baton_sidecar::http::ErrorCode;

use crate::markdown::{cell, code, header, table};

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
