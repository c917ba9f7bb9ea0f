//! The three programs' flags, from their clap definitions (what `--help` prints, as a table).

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::markdown::{cell, code, header, paragraphs, table};

/// `baton-ensemble`: the server's flat flags, then `certs` and `snapshot save|restore`.
pub fn ensemble_page() -> String {
    let mut out = header(
        "baton-ensemble flags",
        "the clap definitions in ensemble/server/src/config.rs, certs_cmd.rs and backup/cmd.rs",
    );
    out.push_str(
        "`baton-ensemble` runs one member; `baton-ensemble certs` and `baton-ensemble snapshot` \
         are its subcommands. Every flag with an environment variable can be given by it \
         instead. Durations are written as in Go and Kubernetes: `500ms`, `30s`, `1m30s`, `2h`.\n\n",
    );
    command_sections(
        &mut out,
        &baton_ensemble::Config::command(),
        "baton-ensemble",
    );
    command_sections(
        &mut out,
        &baton_ensemble::certs_cmd::CertsArgs::command(),
        "baton-ensemble certs",
    );
    command_sections(
        &mut out,
        &baton_ensemble::backup::SnapshotArgs::command(),
        "baton-ensemble snapshot",
    );
    out
}

/// `baton-sidecar`: one flat set of flags.
pub fn sidecar_page() -> String {
    let mut out = header(
        "baton-sidecar flags",
        "the clap definitions in sidecar/src/config.rs",
    );
    out.push_str(
        "The operator's webhook sets these from the pod's `baton.dev/*` annotations when it \
         injects the sidecar. Every flag with an environment variable can be given by it instead. \
         Durations are written as in Go and Kubernetes: `500ms`, `30s`, `1m30s`, `2h`.\n\n",
    );
    command_sections(
        &mut out,
        &baton_sidecar::config::Config::command(),
        "baton-sidecar",
    );
    out
}

/// `baton-operator`: `run`, `crd` and `render`.
pub fn operator_page() -> String {
    let mut out = header(
        "baton-operator flags",
        "the clap definitions in operator/src/cli.rs",
    );
    out.push_str(
        "The chart runs `baton-operator run` with flags and environment variables made from its \
         values ([Helm values](helm-values.md)). Durations are written as in Go and Kubernetes: \
         `500ms`, `30s`, `1m30s`, `2h`.\n\n",
    );
    command_sections(
        &mut out,
        &baton_operator::cli::Cli::command(),
        "baton-operator",
    );
    out
}

/// A section for `cmd` (named `full_name`), then one for each of its subcommands.
fn command_sections(out: &mut String, cmd: &Command, full_name: &str) {
    out.push_str(&format!("## `{full_name}`\n\n"));
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    if !about.is_empty() {
        out.push_str(&paragraphs(&about));
        out.push_str("\n\n");
    }
    let rows: Vec<Vec<String>> = cmd
        .get_arguments()
        .filter(|a| shown(a))
        .map(|a| {
            vec![
                flag(a),
                a.get_env()
                    .map(|e| code(&e.to_string_lossy()))
                    .unwrap_or_default(),
                default(a),
                description(a),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(
            &["flag", "environment", "default", "meaning"],
            &rows,
        ));
        out.push('\n');
    }
    for group in cmd.get_groups().filter(|g| g.is_required_set()) {
        let flags: Vec<String> = group
            .get_args()
            .filter_map(|id| cmd.get_arguments().find(|a| a.get_id() == id))
            .map(|a| {
                code(&format!(
                    "--{}",
                    a.get_long().unwrap_or(a.get_id().as_str())
                ))
            })
            .collect();
        out.push_str(&format!("One of {} is required.\n\n", flags.join(", ")));
    }
    let subcommands: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !subcommands.is_empty() {
        out.push_str("Subcommands:\n\n");
        for sub in &subcommands {
            let about = sub.get_about().map(|s| s.to_string()).unwrap_or_default();
            out.push_str(&format!(
                "- `{full_name} {}`: {}\n",
                sub.get_name(),
                cell(&about)
            ));
        }
        out.push('\n');
    }
    for sub in subcommands {
        command_sections(out, sub, &format!("{full_name} {}", sub.get_name()));
    }
}

/// Whether the reference lists `arg`: not `--help`/`--version`, not hidden (test hooks and
/// unsafe switches are hidden, and some exist only in test builds).
fn shown(arg: &Arg) -> bool {
    !arg.is_hide_set()
        && !matches!(
            arg.get_action(),
            ArgAction::Help | ArgAction::HelpLong | ArgAction::HelpShort | ArgAction::Version
        )
}

fn flag(arg: &Arg) -> String {
    let name = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (None, Some(l)) => format!("--{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, None) => arg.get_id().as_str().to_uppercase(),
    };
    if !arg.get_action().takes_values() || arg.get_long().is_none() && arg.get_short().is_none() {
        return code(&name);
    }
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase().replace('_', "-"));
    let repeat = match (arg.get_value_delimiter(), arg.get_action()) {
        (Some(d), _) => format!("[{d}{value}...]"),
        (None, ArgAction::Append) => " (repeatable)".to_string(),
        _ => String::new(),
    };
    if repeat.starts_with(' ') {
        format!("{}{repeat}", code(&format!("{name} {value}")))
    } else {
        code(&format!("{name} {value}{repeat}"))
    }
}

fn default(arg: &Arg) -> String {
    if arg.is_required_set() {
        return "required".into();
    }
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    match values.as_slice() {
        [] => String::new(),
        [one] if one.is_empty() => "(empty)".into(),
        many => code(&many.join(",")),
    }
}

fn description(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !possible.is_empty() && arg.get_action().takes_values() {
        text.push_str(&format!(" One of: {}.", possible.join(", ")));
    }
    cell(&text)
}
