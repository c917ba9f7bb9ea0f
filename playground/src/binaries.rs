//! How the playground starts `baton-ensemble` and `baton-sidecar`: by running itself.
//!
//! The playground links the `baton-ensemble` and `baton-sidecar` library crates, whose command
//! lines live in their libraries (`baton_ensemble::cli::main`, `baton_sidecar::cli::main`; their
//! own `main.rs` only calls those). `baton-playground ensemble ARGS...` and `baton-playground
//! sidecar ARGS...` run them (see `main`), so `cargo run --release --bin baton-playground` is one
//! cargo build with one feature resolution: each crate compiled once, nothing rebuilt at the next
//! launch, and the demo can never run servers older than itself. (It used to run a second
//! `cargo build` for the two packages, which resolved features differently and rebuilt tokio,
//! rustls, hyper... at every launch.) The linked crates are built without their optional S3,
//! Kubernetes and sidecar-TLS parts, which the demo does not use.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The first argument that makes `baton-playground` run as `baton-ensemble`.
pub const ENSEMBLE: &str = "ensemble";
/// The first argument that makes `baton-playground` run as `baton-sidecar`.
pub const SIDECAR: &str = "sidecar";

/// How to start the two programs: this executable with a leading argument.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// This executable.
    pub exe: PathBuf,
}

impl Binaries {
    /// The running executable, resolved once (a rebuild while the demo runs replaces the file
    /// at this path; restarted children then run the new build, as before).
    pub fn locate() -> Result<Binaries> {
        let exe = std::env::current_exe().context("locate the baton-playground executable")?;
        Ok(Binaries { exe })
    }

    /// The program and leading arguments that run `baton-ensemble`.
    pub fn ensemble(&self) -> (PathBuf, Vec<String>) {
        (self.exe.clone(), vec![ENSEMBLE.to_owned()])
    }

    /// The program and leading arguments that run `baton-sidecar`.
    pub fn sidecar(&self) -> (PathBuf, Vec<String>) {
        (self.exe.clone(), vec![SIDECAR.to_owned()])
    }
}

/// Runs `baton-ensemble` or `baton-sidecar` when the first argument names one; `None` otherwise
/// (the playground itself).
pub fn multi_call() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os();
    let _playground = args.next();
    let first = args.next()?;
    // The rest, behind the program name the child's help and errors should show.
    if first == ENSEMBLE {
        let argv = std::iter::once("baton-ensemble".into()).chain(args);
        Some(baton_ensemble::cli::main(argv))
    } else if first == SIDECAR {
        let argv = std::iter::once("baton-sidecar".into()).chain(args);
        Some(baton_sidecar::cli::main(argv))
    } else {
        None
    }
}
