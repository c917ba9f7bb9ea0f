//! Helm as the tests run it: the one `tests/scripts/validate-chart.sh` installs.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::Kube;

/// `$BATON_HELM`, else the tools directory's (`validate-chart.sh` installs it there), else the
/// PATH's.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BATON_HELM") {
        return path.into();
    }
    let tools = std::env::var_os("BATON_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/baton-tools")));
    match tools.map(|t| t.join("bin/helm")) {
        Some(path) if path.is_file() => path,
        _ => "helm".into(),
    }
}

/// Runs Helm with `args`: its standard output, or an error carrying its standard error.
pub fn run<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let helm = binary();
    let out = Command::new(&helm).args(&args).output().with_context(|| {
        format!(
            "run {} (tests/scripts/validate-chart.sh installs it; or set BATON_HELM)",
            helm.display()
        )
    })?;
    ensure!(
        out.status.success(),
        "helm {}: {}\n{}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs Helm against the test's namespace with the admin kubeconfig.
pub fn run_in(kube: &Kube, args: &[&str]) -> Result<String> {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.push("--namespace".into());
    all.push(kube.namespace.clone().into());
    all.push("--kubeconfig".into());
    all.push(kube.plane.kubeconfig.clone().into());
    run(all)
}
