//! Finding `baton-ensemble` and `baton-sidecar`, and building them when the playground was
//! started by `cargo run`.
//!
//! Why the playground builds its siblings itself: the README promises one command on a fresh
//! clone, `cargo run --release --bin baton-playground`, but cargo builds only the requested
//! package's binaries, and a crate cannot depend on another crate's binary. A build script
//! cannot run cargo on the same target dir either (it would wait on the lock its own build
//! holds). So when `cargo run` started us (it sets `CARGO` in our environment), we run
//! `cargo build` for the two packages in the same profile, which puts them next to our own
//! executable; when they are current that costs about a second, and it means the demo never
//! runs stale servers after a `git pull`. Started any other way (`target/release/baton-playground`,
//! or a test with `--no-build`), we use the binaries next to us as they are and say how to
//! build them when they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The two programs the playground runs, as paths that existed when they were located.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub ensemble: PathBuf,
    pub sidecar: PathBuf,
}

/// The binaries next to this executable, built first when `build` is set and cargo started us.
pub fn locate(build: bool) -> Result<Binaries> {
    let exe = std::env::current_exe().context("locate the baton-playground executable")?;
    let dir = exe
        .parent()
        .with_context(|| format!("{} has no parent directory", exe.display()))?;
    let cargo = std::env::var_os("CARGO");
    if let (true, Some(cargo)) = (build, cargo) {
        build_siblings(Path::new(&cargo), dir)?;
    }
    let binaries = Binaries {
        ensemble: dir.join("baton-ensemble"),
        sidecar: dir.join("baton-sidecar"),
    };
    let missing: Vec<String> = [&binaries.ensemble, &binaries.sidecar]
        .into_iter()
        .filter(|path| !path.is_file())
        .map(|path| path.display().to_string())
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing {}: build them first with `cargo build --release --bins` (or `cargo build \
             --workspace --bins` for a debug playground), or start the playground with \
             `cargo run --release --bin baton-playground`, which builds them",
            missing.join(" and ")
        );
    }
    Ok(binaries)
}

/// Runs `cargo build` for the ensemble and the sidecar in the profile `dir` belongs to.
fn build_siblings(cargo: &Path, dir: &Path) -> Result<()> {
    let profile = match dir.file_name().and_then(|name| name.to_str()) {
        // The `dev` profile's directory is named `debug`; every other profile keeps its name.
        Some("debug") => "dev",
        Some(name) => name,
        None => bail!("cannot tell the cargo profile of {}", dir.display()),
    };
    // The manifest recorded at compile time: `cargo run` may have been typed in any
    // directory of the workspace, and `-p` needs the workspace.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    // The target dir this executable sits in, in case `cargo run` was given another one.
    let target_dir = dir
        .parent()
        .with_context(|| format!("{} is not inside a cargo target dir", dir.display()))?;
    let args = [
        "build",
        "--profile",
        profile,
        "-p",
        "baton-ensemble",
        "-p",
        "baton-sidecar",
        "--bins",
    ];
    tracing::info!(
        "building the ensemble and the sidecar: cargo {}",
        args.join(" ")
    );
    let status = Command::new(cargo)
        .args(args)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .with_context(|| format!("run {} build", cargo.display()))?;
    if !status.success() {
        bail!(
            "`cargo {}` failed ({status}); its errors are above",
            args.join(" ")
        );
    }
    Ok(())
}
