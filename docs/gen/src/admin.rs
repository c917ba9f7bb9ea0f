//! The ensemble's admin API page, from `baton_ensemble::admin_api::ADMIN_ROUTES` (which the
//! admin router's own test checks against its match arms).

use baton_ensemble::admin_api::ADMIN_ROUTES;

use crate::markdown::{cell, code, header, table};

/// The page.
pub fn page() -> String {
    let mut out = header(
        "Admin API",
        "the ADMIN_ROUTES table in ensemble/server/src/admin_api.rs",
    );
    out.push_str(
        "Each member serves it on `--admin-addr`, HTTPS with the member's certificate. The calls \
         marked *open* answer anyone (probes, Prometheus); every other call needs the admin \
         certificate of the ensemble's CA and is refused otherwise with 403 `Forbidden` \
         (`curl --cacert ca.crt --cert admin.crt --key admin.key https://…`; in Kubernetes see \
         [Call an ensemble's admin API](../tasks/admin-api.md)). Errors are JSON \
         `{\"error\": {\"code\", \"message\"}}`; an unknown path is 404 `NotFound`, a known path \
         with another method 405 `MethodNotAllowed`. Calls marked *leader only* are acted on by \
         the leader; other members answer 421 `NotLeader` with the leader's id as \
         `error.leaderId`, to send it there.\n\n",
    );
    let rows: Vec<Vec<String>> = ADMIN_ROUTES
        .iter()
        .map(|r| {
            let mut who = Vec::new();
            if r.open {
                who.push("open");
            }
            if r.leader_only {
                who.push("leader only");
            }
            vec![
                code(&format!("{} {}", r.method, r.path)),
                who.join(", "),
                cell(r.body),
                cell(r.answer),
                r.errors
                    .iter()
                    .map(|e| match e.split_once(' ') {
                        Some((status, name)) => format!("{status} {}", code(name)),
                        None => code(e),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    out.push_str(&table(&["call", "", "body", "answer", "errors"], &rows));
    out.push_str(
        "\nLogs go to stderr; `BATON_LOG` takes a `tracing` filter (default `info,raft=warn`). \
         The flags are in [baton-ensemble flags](baton-ensemble.md).\n",
    );
    out
}
