//! The documentation's reference pages, made from the code: each page is a function of what the
//! programs define (clap commands, the CRD's schema, the chart's values, the metric registries,
//! the sidecar's error codes, the label and annotation constants). `cargo run -p
//! baton-docs` writes them under `docs/src/reference/`; the `reference_is_current` test fails when
//! a committed page differs from what the code says.

pub mod admin;
pub mod cli;
pub mod crd;
pub mod helm;
pub mod markdown;
pub mod metadata;
pub mod metrics;
pub mod sidecar_api;
pub mod zookeeper;

use std::path::{Path, PathBuf};

/// One generated page: its file under `docs/src/reference/` and its Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub file: &'static str,
    pub text: String,
}

/// What regenerates the pages, named in each page's header and in the drift test's message.
pub const UPDATE_COMMAND: &str = "cargo run -p baton-docs";

/// The repository's root (this crate is `docs/gen`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the pages go.
pub fn reference_dir() -> PathBuf {
    repo_root().join("docs/src/reference")
}

/// Every generated page, in the order the table of contents lists them.
pub fn pages() -> Result<Vec<Page>, String> {
    let root = repo_root();
    Ok(vec![
        Page {
            file: "baton-ensemble.md",
            text: cli::ensemble_page(),
        },
        Page {
            file: "baton-sidecar.md",
            text: cli::sidecar_page(),
        },
        Page {
            file: "baton-operator.md",
            text: cli::operator_page(),
        },
        Page {
            file: "crd.md",
            text: crd::page()?,
        },
        Page {
            file: "helm-values.md",
            text: helm::page(&root.join("charts/baton/values.yaml"))?,
        },
        Page {
            file: "metrics.md",
            text: metrics::page(),
        },
        Page {
            file: "sidecar-api.md",
            text: sidecar_api::routes_page(),
        },
        Page {
            file: "sidecar-openapi.json",
            text: sidecar_api::openapi_document(),
        },
        Page {
            file: "sidecar-errors.md",
            text: sidecar_api::errors_page(),
        },
        Page {
            file: "annotations.md",
            text: metadata::page(),
        },
        Page {
            file: "admin-api.md",
            text: admin::page(),
        },
        Page {
            file: "zookeeper.md",
            text: zookeeper::page()?,
        },
    ])
}

/// The first line where `committed` and `generated` differ: (1-based line number, committed
/// line, generated line); `None` when they are equal.
pub fn first_difference(committed: &str, generated: &str) -> Option<(usize, String, String)> {
    if committed == generated {
        return None;
    }
    let mut a = committed.lines();
    let mut b = generated.lines();
    let mut n = 0;
    loop {
        n += 1;
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (None, None) => {
                // Same lines, different line endings or final newline.
                return Some((n, "(end of file)".into(), "(end of file)".into()));
            }
            (x, y) => {
                let show = |l: Option<&str>| l.map_or("(end of file)".to_string(), str::to_string);
                return Some((n, show(x), show(y)));
            }
        }
    }
}
