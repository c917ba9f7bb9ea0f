//! The compatibility page: every opcode of ZooKeeper's `ZooDefs.OpCode` and every four-letter
//! word, each with what Baton does with it, asked of the code that decides (the request
//! decoder, the four-letter answers and their default allow-list); then the behaviours that
//! knowingly differ, which no table in the code holds.

use baton_ensemble::server::four_letter::{AllowedWords, answer};
use baton_ensemble::status::Status;
use baton_proto::codec::decode_request;
use baton_proto::frame::FOUR_LETTER_WORDS;
use baton_proto::{DecodeError, OpCode};

use crate::markdown::{cell, code, header, table};

/// Why Baton does not serve an opcode ZooKeeper has. Every opcode the decoder refuses needs one
/// (the page fails to build otherwise), so a newly refused opcode cannot go unexplained.
const NOT_SERVED: [(OpCode, &str); 6] = [
    (
        OpCode::Notification,
        "Not a request: the type of a watch event the server sends.",
    ),
    (
        OpCode::Error,
        "Not a request: ZooKeeper's marker for a failed transaction.",
    ),
    (
        OpCode::CreateSession,
        "Not a request: the connect handshake, a frame of its own, which Baton serves \
         (session id and password, `lastZxidSeen`, the read-only flag or its absence).",
    ),
    (
        OpCode::DeleteContainer,
        "Server-internal in ZooKeeper too (its container reaper); Baton removes empty \
         containers and expired TTL nodes itself.",
    ),
    (
        OpCode::Reconfig,
        "Membership is the admin API's job (`POST /v1/members`, driven by the operator). \
         Answered `Unimplemented`, and the connection closed, as ZooKeeper answers an \
         unknown request.",
    ),
    (
        OpCode::Sasl,
        "No SASL: clients prove who they are with a TLS client certificate, a digest, or \
         (`--k8s-auth`) a Kubernetes service-account token. Answered `Unimplemented`.",
    ),
];

/// Behaviours that differ from ZooKeeper 3.8 although the request is served.
const DIFFERENCES: [&str; 6] = [
    "Extra rules under `/baton/`: owner-only deletion, and with `--check-identities` the \
     namespace policy (see [Tenancy](../concepts/tenancy.md#client-identities-namespaces-and-owners)). \
     Elsewhere the tree behaves as ZooKeeper's.",
    "A standalone `check` is answered (ZooKeeper 3.8 drops the connection).",
    "A getData watch does not replace a persistent watch on the same path (ZOOKEEPER-4466, \
     fixed in 3.9).",
    "The persistent watcher types in `removeWatches` work (ZOOKEEPER-4471, ZOOKEEPER-4472).",
    "`createTTL` with ttl -1 is `BadArguments` (it crashed 3.8's apply thread).",
    "Quotas per tenant are always enforced, replicated settings rather than \
     `/zookeeper/quota` znodes; a write past one is refused with `BadArguments` (-8), which \
     every client decodes, not 3.7's `QuotaExceeded` (-125), which older ones cannot (see \
     [Limits and quotas](limits.md#what-one-tenant-can-take)).",
];

/// Whether the request decoder serves `op`: it refuses the ones it does not as unknown before
/// reading a byte of the body.
fn served(op: OpCode) -> bool {
    !matches!(
        decode_request(op.code(), &[]),
        Err(DecodeError::UnknownOpCode(_))
    )
}

/// Every opcode `OpCode::from_code` knows, by wire value.
fn opcodes() -> Vec<OpCode> {
    (-64..=1024).filter_map(OpCode::from_code).collect()
}

/// The page, or what in the code the page cannot explain.
pub fn page() -> Result<String, String> {
    let mut out = header(
        "Compatibility with Apache ZooKeeper",
        "the request decoder (ensemble/proto/src/codec/requests.rs), the four-letter words \
         (ensemble/server/src/server/four_letter.rs) and docs/gen/src/zookeeper.rs",
    );
    out.push_str(
        "Baton speaks ZooKeeper 3.8's wire protocol. It is tested with clients nobody here wrote: \
         Apache ZooKeeper's `zkCli.sh` and C client, Curator, kazoo 2.8 (its Lock, Election, \
         DataWatch and ChildrenWatch recipes), go-zookeeper, node-zookeeper-client and the \
         `zookeeper-client` Rust crate; the end-to-end suite in `tests/` runs its cases against \
         both Baton and Apache ZooKeeper 3.8. Error codes, their \
         precedence, `Stat` fields, multi results and sequential names follow ZooKeeper 3.8, \
         checked against the real server.\n\n\
         ## Requests\n\n\
         Every opcode of ZooKeeper's `ZooDefs.OpCode`. An opcode Baton does not serve is \
         answered `Unimplemented` and the connection closed, as ZooKeeper answers a request it \
         does not know.\n\n",
    );
    let mut rows = Vec::new();
    for op in opcodes() {
        let reason = NOT_SERVED.iter().find(|(o, _)| *o == op).map(|(_, r)| *r);
        let row = match (served(op), reason) {
            (true, None) => vec![
                op.code().to_string(),
                code(op.zookeeper_name()),
                "served".into(),
                String::new(),
            ],
            (false, Some(reason)) => vec![
                op.code().to_string(),
                code(op.zookeeper_name()),
                "not served".into(),
                cell(reason),
            ],
            (true, Some(_)) => {
                return Err(format!(
                    "docs/gen/src/zookeeper.rs says why {} is not served, but the decoder \
                     serves it: remove it from NOT_SERVED",
                    op.zookeeper_name()
                ));
            }
            (false, None) => {
                return Err(format!(
                    "the decoder does not serve {}: say why in NOT_SERVED \
                     (docs/gen/src/zookeeper.rs)",
                    op.zookeeper_name()
                ));
            }
        };
        rows.push(row);
    }
    out.push_str(&table(
        &["opcode", "ZooKeeper's name", "Baton", "why not"],
        &rows,
    ));

    out.push_str(
        "\n## Four-letter words\n\n\
         Sent on the client port instead of a handshake, as monitoring tools do. A member \
         answers the words `--four-letter-words` allows (ZooKeeper's `4lw.commands.whitelist`; \
         `srvr` always), in ZooKeeper's formats; any other allowed word gets \"not supported \
         by Baton\", and a word left out of the list gets ZooKeeper's own refusal. Whoever \
         sends a word is anonymous, so no answer names a session.\n\n",
    );
    let status = Status::default();
    let defaults = AllowedWords::default();
    let rows: Vec<Vec<String>> = FOUR_LETTER_WORDS
        .iter()
        .map(|&word| {
            let answered = !answer(word, &status).contains("not supported by Baton");
            vec![
                code(word),
                if answered {
                    "answered"
                } else {
                    "not supported"
                }
                .into(),
                if defaults.allows(word) { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    out.push_str(&table(&["word", "Baton", "allowed by default"], &rows));

    out.push_str("\n## Knowingly different\n\n");
    for difference in DIFFERENCES {
        out.push_str(&format!("- {difference}\n"));
    }
    out.push_str(
        "\nThe `super` digest user works as in ZooKeeper, with `--super-digest`. A client that \
         omits the handshake's trailing read-only flag, as those before 3.4 do, is answered \
         without it too (36 bytes), as ZooKeeper's `isOldClient` does.\n",
    );
    Ok(out)
}
