//! The image runs what the chart and the operator ask of it: every program the chart's
//! templates and the operator's generated objects (the members' StatefulSet, the restore init
//! container, the backup CronJob, the injected sidecar) start is a binary the Dockerfile's build
//! stage builds and copies, and every flag and `BATON_*` variable they pass is in that binary's
//! `--help` (of the subcommand they run). The binaries checked are the workspace's own, next to
//! this test's `baton-operator` (`cargo build --workspace --bins` builds them, as the
//! Dockerfile does for the release profile).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use baton_operator::build::{StoredMembership, build};
use baton_operator::crd::CoordinationEnsemble;
use baton_operator::names::EnsembleNames;
use baton_operator::validate::validate;
use baton_operator::webhook::sidecar::{LEADER_READY_PATH, SidecarSpec, container};
use k8s_openapi::api::core::v1::Container;

/// What one object asks of one program: its subcommand words, its long flags and the
/// environment variables it sets for it.
#[derive(Debug, Default)]
struct Use {
    program: String,
    subcommand: Vec<String>,
    flags: BTreeSet<String>,
    env: BTreeSet<String>,
    /// Where it comes from, for messages.
    from: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the operator sits in the workspace")
        .to_path_buf()
}

/// The binaries the Dockerfile's build stage builds (`--bin NAME`), checked to be the ones
/// it copies into the run stage.
fn dockerfile_binaries(dockerfile: &str) -> BTreeSet<String> {
    let mut stages = dockerfile.split("\nFROM ");
    let _preamble = stages.next();
    let build = stages
        .next()
        .expect("the Dockerfile has a build stage (a first FROM)");
    let run = stages
        .next()
        .expect("the Dockerfile has a run stage (a second FROM)");
    let words: Vec<&str> = build.split_whitespace().collect();
    let built: BTreeSet<String> = words
        .windows(2)
        .filter(|w| w[0] == "--bin")
        .map(|w| w[1].to_owned())
        .collect();
    assert!(!built.is_empty(), "no `--bin NAME` in the build stage");
    let copied: BTreeSet<String> = words
        .iter()
        .filter_map(|w| w.strip_prefix("target/release/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        built, copied,
        "the build stage must copy out exactly what it builds"
    );
    assert!(
        run.contains("COPY --from=build /out/"),
        "the run stage takes the built binaries"
    );
    built
}

/// `command:` lists in the chart's templates, with the `- --flag` items of the `args:` after.
fn chart_uses() -> Vec<Use> {
    let dir = workspace().join("charts/baton/templates");
    let mut uses = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read the chart's templates")
        .map(|e| e.expect("template entry").path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read a template");
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let Some(list) = line.trim().strip_prefix("command:") else {
                continue;
            };
            let words: Vec<String> = serde_json::from_str(list.trim()).unwrap_or_else(|e| {
                panic!("{}: command {list} is not a flow list: {e}", path.display())
            });
            let mut u = Use {
                program: words[0].clone(),
                subcommand: words[1..].to_vec(),
                from: format!("{}:{}", path.display(), at + 1),
                ..Use::default()
            };
            // The args list: items until the next key at the container's indentation.
            let indent = line.len() - line.trim_start().len();
            let mut in_args = false;
            for next in &lines[at + 1..] {
                let trimmed = next.trim_start();
                let next_indent = next.len() - trimmed.len();
                if trimmed.starts_with("{{") || trimmed.starts_with('#') || trimmed.is_empty() {
                    continue;
                }
                if next_indent <= indent {
                    in_args = trimmed.starts_with("args:");
                    if !in_args {
                        break;
                    }
                    continue;
                }
                if in_args && let Some(flag) = trimmed.strip_prefix("- --") {
                    u.flags.insert(format!("--{}", flag_name(flag)));
                }
            }
            uses.push(u);
        }
    }
    uses
}

/// `NAME` of `NAME=VALUE`, `NAME VALUE` or `NAME;` (a flag at the end of a shell command).
fn flag_name(rest: &str) -> &str {
    rest.split(['=', ' ', '"', ';']).next().unwrap_or_default()
}

/// What a container asks of the image's programs: its command directly, or the programs a
/// `/bin/sh -c SCRIPT` runs (with the container's args as the script's "$@").
fn container_uses(c: &Container, programs: &BTreeSet<String>, from: &str) -> Vec<Use> {
    let command = c.command.clone().unwrap_or_default();
    let args = c.args.clone().unwrap_or_default();
    let env: Vec<String> = c.env.iter().flatten().map(|e| e.name.clone()).collect();
    // `$(NAME)` in another variable's value is Kubernetes' substitution, not a program's input.
    let substituted: BTreeSet<String> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| e.value.as_deref())
        .flat_map(|v| v.split("$(").skip(1))
        .filter_map(|rest| rest.split(')').next())
        .map(str::to_owned)
        .collect();
    let arg_flags = || {
        args.iter()
            .filter_map(|a| a.strip_prefix("--"))
            .map(|f| format!("--{}", flag_name(f)))
    };
    let baton_env = |script: &str| -> BTreeSet<String> {
        env.iter()
            .filter(|name| name.starts_with("BATON_") && *name != "BATON_LOG")
            .filter(|name| !substituted.contains(*name))
            // A variable the script reads itself is the script's, not the program's.
            .filter(|name| {
                !script.contains(&format!("${{{name}")) && !script.contains(&format!("${name}"))
            })
            .cloned()
            .collect()
    };
    if command.first().map(String::as_str) == Some("/bin/sh") {
        assert_eq!(command.get(1).map(String::as_str), Some("-c"), "{from}");
        let script = command.get(2).expect("a script");
        let mut uses = Vec::new();
        // Join continued lines, then take every line that runs one of the image's programs.
        let joined = script.replace("\\\n", " ");
        for line in joined.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| programs.contains(*w)) else {
                continue;
            };
            let mut u = Use {
                program: words[at].to_owned(),
                from: format!("{from}: `{}`", line.trim()),
                ..Use::default()
            };
            let rest = &words[at + 1..];
            u.subcommand = rest
                .iter()
                .take_while(|w| !w.starts_with('-') && !w.starts_with('"'))
                .map(|w| (*w).to_owned())
                .collect();
            u.flags = rest
                .iter()
                .filter_map(|w| w.strip_prefix("--"))
                .map(|f| format!("--{}", flag_name(f)))
                .collect();
            // `set -- "$@" --join` and the like: flags the script adds to "$@".
            if line.contains("\"$@\"") {
                u.flags.extend(arg_flags());
                for other in joined.lines().filter(|l| l.contains("set --")) {
                    u.flags.extend(
                        other
                            .split_whitespace()
                            .filter_map(|w| w.strip_prefix("--"))
                            .filter(|f| !f.is_empty())
                            .map(|f| format!("--{}", flag_name(f))),
                    );
                }
            }
            // Variables the script exports for the program.
            u.env = baton_env(script);
            u.env.extend(
                joined
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("export "))
                    .filter_map(|l| l.split('=').next())
                    .filter(|name| name.starts_with("BATON_"))
                    .map(str::to_owned),
            );
            uses.push(u);
        }
        assert!(
            !uses.is_empty(),
            "{from}: the script runs none of {programs:?}"
        );
        uses
    } else {
        let program = command
            .first()
            .cloned()
            .unwrap_or_else(|| panic!("{from}: no command"));
        vec![Use {
            program,
            subcommand: command[1..].to_vec(),
            flags: arg_flags().collect(),
            env: baton_env(""),
            from: from.to_owned(),
        }]
    }
}

fn ensemble(spec: &str) -> CoordinationEnsemble {
    let yaml = format!(
        "apiVersion: baton.dev/v1alpha1
kind: CoordinationEnsemble
metadata: {{name: zk, namespace: prod, uid: 7d1b, generation: 2}}
spec: {spec}
"
    );
    serde_saphyr::from_str(&yaml).expect("test YAML parses")
}

/// Every container the operator generates, from specs that turn on each optional part.
fn operator_containers() -> Vec<(String, Container)> {
    let empty = baton_operator::pki::StoredPki::default();
    let now = "2026-11-23T12:00:00Z".parse().expect("timestamp");
    let plan = baton_operator::pki::plan(&empty, &[1, 2, 3, 4, 5], now);
    let pki = baton_operator::pki::issue(&empty, &plan, &EnsembleNames::new("zk", "prod"), now)
        .expect("pki");
    let operator = baton_operator::build::OperatorPods::default();
    let specs = [
        "{replicas: 5, plainClientPort: true}",
        "{backup: {schedule: '@daily', keep: 2, target: {s3: {bucket: my-bucket, prefix: p, endpoint: 'https://minio:9000', region: eu-1, credentialsSecret: s3}}}}",
        "{backup: {schedule: '@daily', keep: 2, target: {pvc: {claimName: backups, path: zk/daily}}}}",
        "{restoreFrom: {s3: {bucket: my-bucket, key: p/, endpoint: 'https://minio:9000', region: eu-1, credentialsSecret: s3}}}",
    ];
    let mut containers = Vec::new();
    for spec in specs {
        let ce = ensemble(spec);
        let valid = validate(&ce, "baton:test").expect("valid spec");
        let built = build(
            &ce,
            &valid,
            StoredMembership {
                replicas: 4,
                bootstrap: 3,
            },
            &pki,
            &operator,
            None,
        )
        .expect("built");
        let pod = built
            .statefulset
            .spec
            .and_then(|s| s.template.spec)
            .expect("a pod template");
        for c in pod.init_containers.into_iter().flatten() {
            containers.push((format!("StatefulSet init container {} ({spec})", c.name), c));
        }
        for c in pod.containers {
            containers.push((format!("StatefulSet container {} ({spec})", c.name), c));
        }
        let job_pod = built
            .backup
            .and_then(|cj| cj.spec)
            .and_then(|s| s.job_template.spec)
            .and_then(|j| j.template.spec);
        for c in job_pod.into_iter().flat_map(|p| p.containers) {
            containers.push((format!("backup CronJob container {} ({spec})", c.name), c));
        }
    }
    let sidecar = container(&SidecarSpec {
        image: "baton:test".into(),
        ensemble_endpoint: "zk-client.prod.svc:2281".into(),
        elections: "main,other".into(),
        address_port_suffix: ":8080".into(),
        label_pod: true,
        mirror_lease: true,
        app_health: Some("http://127.0.0.1:8080/healthz".into()),
        app_candidacy: true,
        native: true,
        ready_path: LEADER_READY_PATH,
        defaults: serde_saphyr::from_str("{sessionTimeout: 10s}").expect("defaults"),
    });
    containers.push(("the injected sidecar".into(), sidecar));
    containers
}

/// `PROGRAM SUBCOMMAND... --help` of the binary next to this test's `baton-operator`.
fn help(binary: &Path, subcommand: &[String]) -> String {
    let out = Command::new(binary)
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {} --help: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{} {} --help failed: {}",
        binary.display(),
        subcommand.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

#[test]
fn the_image_builds_every_program_and_flag_the_chart_and_the_operator_use() {
    let root = workspace();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("read the Dockerfile");
    let programs = dockerfile_binaries(&dockerfile);
    let mut uses = chart_uses();
    assert!(
        uses.iter().any(|u| u.program == "baton-operator"),
        "the chart starts the operator: {uses:?}"
    );
    for (from, c) in operator_containers() {
        uses.extend(container_uses(&c, &programs, &from));
    }
    // The image's default command, too.
    let cmd = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    uses.push(Use {
        program: cmd[0].clone(),
        subcommand: cmd[1..].to_vec(),
        from: "the Dockerfile's CMD".into(),
        ..Use::default()
    });

    let here = Path::new(env!("CARGO_BIN_EXE_baton-operator"))
        .parent()
        .expect("a target dir")
        .to_path_buf();
    let mut helps: BTreeMap<(String, Vec<String>), String> = BTreeMap::new();
    let mut missing = Vec::new();
    for u in &uses {
        if !programs.contains(&u.program) {
            missing.push(format!(
                "{}: program {} is not built by the Dockerfile",
                u.from, u.program
            ));
            continue;
        }
        let binary = here.join(&u.program);
        assert!(
            binary.is_file(),
            "{} is missing: run `cargo build --workspace --bins` first (tests/scripts/test.sh does)",
            binary.display()
        );
        let text = helps
            .entry((u.program.clone(), u.subcommand.clone()))
            .or_insert_with(|| help(&binary, &u.subcommand));
        for flag in &u.flags {
            // clap lists `--flag <VALUE>`, `--flag=<VALUE>`, `--flag` at a line's end, `--flag,`...
            let listed = text.match_indices(flag.as_str()).any(|(at, _)| {
                let after = text[at + flag.len()..].chars().next();
                !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
            if !listed {
                missing.push(format!(
                    "{}: {} {} has no {flag}",
                    u.from,
                    u.program,
                    u.subcommand.join(" ")
                ));
            }
        }
        for name in &u.env {
            // `[env: NAME=]`, or `[env: NAME]` for a variable whose values help hides.
            if !text.contains(&format!("env: {name}=")) && !text.contains(&format!("env: {name}]"))
            {
                missing.push(format!(
                    "{}: {} {} reads no {name}",
                    u.from,
                    u.program,
                    u.subcommand.join(" ")
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // The check saw what it should: the members, the backup and the sidecar.
    for program in ["baton-ensemble", "baton-sidecar", "baton-operator"] {
        assert!(
            uses.iter()
                .any(|u| u.program == program && !(u.flags.is_empty() && u.env.is_empty())),
            "nothing checked for {program}: {uses:#?}"
        );
    }
}
