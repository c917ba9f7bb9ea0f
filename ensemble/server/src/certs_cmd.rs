//! `baton-ensemble certs`: a CA and certificates in a folder, for running an ensemble by hand
//! (the playground, the tests, a laptop). In Kubernetes the operator issues them instead.

use std::path::PathBuf;

use clap::Parser;

/// Make an ensemble CA and its member and admin certificates in a folder.
///
/// Writes DIR/ca.crt, DIR/ca.key, DIR/member-N.crt and .key for every id, and DIR/admin.crt
/// and .key. Start member N with `--tls-ca DIR/ca.crt --tls-cert DIR/member-N.crt --tls-key
/// DIR/member-N.key`; call the admin API with the admin pair, e.g. `curl --cacert DIR/ca.crt
/// --cert DIR/admin.crt --key DIR/admin.key https://127.0.0.1:8080/v1/status`. With --add,
/// issues certificates for more members from the CA already in DIR. Keys are written 0600;
/// keep ca.key away from the members.
#[derive(Parser, Debug)]
#[command(name = "baton-ensemble certs")]
pub struct CertsArgs {
    /// Folder to write into (created if missing).
    #[arg(long)]
    pub out: PathBuf,

    /// The ensemble's cluster id; members started with these certificates take it.
    #[arg(long)]
    pub cluster_id: String,

    /// Member ids to issue certificates for, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub ids: Vec<u64>,

    /// Host names and IP addresses the members answer to (for TLS clients that check them:
    /// zkCli, kazoo, curl), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1,::1")]
    pub hosts: Vec<String>,

    /// Add member certificates to the CA already in --out instead of making a new CA.
    #[arg(long)]
    pub add: bool,
}

/// Runs the subcommand; the error is for the user.
pub fn run(args: CertsArgs) -> Result<(), baton_tls::TlsError> {
    let hosts = baton_tls::HostNames(args.hosts);
    if args.add {
        for id in &args.ids {
            baton_tls::local::add_member(&args.out, &args.cluster_id, *id, &hosts)?;
        }
    } else {
        baton_tls::local::write_dir(&args.out, &args.cluster_id, &args.ids, &hosts)?;
    }
    eprintln!(
        "wrote certificates for cluster {} (members {:?}, admin) to {}",
        args.cluster_id,
        args.ids,
        args.out.display()
    );
    Ok(())
}
