//! Nothing of the test bench in the product: the image's build (the Dockerfile's `cargo build`)
//! and the playground's resolve baton-ensemble and baton-machine without their `testing`
//! feature, so the test-only flags (`--unsafe-testing-*`), the raw-proposal endpoint and the
//! simulation's deliberate bugs are not compiled into what users run. The workspace's own
//! build, which the tests use, does turn it on: the same check of it proves the resolver's
//! answer is read right. Asks cargo's feature resolver (`cargo tree`), offline and locked.

use std::collections::BTreeMap;
use std::process::Command;

use baton_tests::workspace;

/// The Dockerfile's `cargo build` words, from `cargo` to the end of that command.
fn dockerfile_build_args() -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).expect("read Dockerfile");
    let joined = text.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("the Dockerfile runs cargo build");
    let from = line.find("cargo build").expect("found above");
    line[from..]
        .split("&&")
        .next()
        .expect("a command")
        .split_whitespace()
        .skip(2)
        .map(str::to_owned)
        .collect()
}

/// The features each workspace package gets when cargo builds `selection`.
fn resolved_features(selection: &[&str]) -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-f", "{p}|{f}"])
        .args(selection)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {selection:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut features = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, list)) = line.split_once('|') else {
            continue;
        };
        let name = package.split_whitespace().next().unwrap_or_default();
        if !name.starts_with("baton-") {
            continue;
        }
        let list = list.trim_end_matches(" (*)");
        features.insert(
            name.to_owned(),
            list.split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect(),
        );
    }
    features
}

fn with_testing(features: &BTreeMap<String, Vec<String>>) -> Vec<&str> {
    features
        .iter()
        .filter(|(_, f)| f.iter().any(|f| f == "testing"))
        .map(|(p, _)| p.as_str())
        .collect()
}

#[test]
fn the_image_build_selects_each_program_and_leaves_testing_off() {
    let args = dockerfile_build_args();
    for refused in ["--workspace", "--all", "--features", "-F", "--all-features"] {
        assert!(
            !args
                .iter()
                .any(|a| a == refused || a.starts_with("--features=")),
            "the Dockerfile's cargo build must not use {refused}: it would unify features with the test crates ({args:?})"
        );
    }
    let selection: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "-p" || w[0] == "--package")
        .flat_map(|w| ["-p", w[1].as_str()])
        .collect();
    assert!(
        selection.contains(&"baton-ensemble"),
        "the image builds baton-ensemble: {args:?}"
    );
    let features = resolved_features(&selection);
    assert_eq!(
        features.get("baton-ensemble").map(Vec::as_slice),
        Some(["default", "k8s", "s3"].map(str::to_owned).as_slice()),
        "the image's baton-ensemble has its default features, S3 and TokenReview included"
    );
    assert_eq!(with_testing(&features), Vec::<&str>::new());
}

#[test]
fn the_playground_leaves_testing_off() {
    let features = resolved_features(&["-p", "baton-playground"]);
    assert!(features.contains_key("baton-ensemble"));
    assert_eq!(with_testing(&features), Vec::<&str>::new());
}

#[test]
fn the_workspace_build_the_tests_use_turns_testing_on() {
    let features = resolved_features(&["--workspace"]);
    assert_eq!(
        with_testing(&features),
        ["baton-ensemble", "baton-machine"],
        "the end-to-end tests start members with --unsafe-testing-* flags"
    );
}
