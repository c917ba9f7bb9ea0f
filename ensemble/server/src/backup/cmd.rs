//! `baton-ensemble snapshot save|restore`: flags and help (DESIGN.md §1, CLI contract).

use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand};

use super::{restore, save};

/// Back up an ensemble's tree, and restore it into a new ensemble.
///
/// `save` downloads a consistent snapshot from a running member's admin API (the state as
/// applied through at least the commit index the leader confirmed when asked) and writes it
/// to a file or to S3. `restore` turns a backup into the data dir of one member of a NEW
/// ensemble; restore every member from the same backup, each with its own --id, then start
/// them as usual. Run `baton-ensemble snapshot save --help` and `... restore --help` for more.
#[derive(Parser, Debug)]
#[command(
    name = "baton-ensemble snapshot",
    bin_name = "baton-ensemble snapshot",
    version
)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    Save(SaveArgs),
    Restore(RestoreArgs),
}

/// Download a consistent snapshot of a running ensemble and write it as a backup.
///
/// Calls GET /v1/snapshot on --admin-url with the admin certificate (any member will do: it
/// first has the leader confirm its commit index, so the backup holds every write acknowledged
/// before the call). The backup (a header with the cluster id, index, term and the body's
/// SHA-256, then the tree, sessions and address book) is checked whole before anything is
/// written; a file is written atomically (temporary file, fsync, rename).
///
/// With --s3-url the object is PREFIX/<cluster-id>-<index:020>-<UTC yyyymmddThhmmssZ>.baton-backup;
/// credentials come from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and
/// AWS_SESSION_TOKEN for temporary ones). --keep N then deletes the older backups of the same
/// cluster id directly under PREFIX beyond the newest N.
///
/// Prints one JSON line: {"location", "clusterId", "index", "sha256", "bytes"} (sha256 and bytes
/// of the whole backup file).
///
/// Example: baton-ensemble snapshot save --admin-url https://127.0.0.1:8080 --tls-ca ca.crt
/// --tls-cert admin.crt --tls-key admin.key --out /backups/
#[derive(Parser, Debug, Clone)]
#[command(group(ArgGroup::new("destination").required(true).args(["out", "s3_url"])))]
pub struct SaveArgs {
    /// The admin API of any member: https://HOST:PORT (http:// for an ensemble run with
    /// --insecure-no-tls).
    #[arg(long)]
    pub admin_url: String,

    /// The ensemble CA's certificate.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,

    /// The admin certificate (`baton-ensemble certs` writes admin.crt; the operator keeps it in
    /// the Secret NAME-admin).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,

    /// The admin certificate's key.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,

    /// Write the backup to this file (replaced if it exists); an existing directory gets a file
    /// named like an S3 object.
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// Upload the backup under this prefix: s3://BUCKET/PREFIX/.
    #[arg(long)]
    pub s3_url: Option<String>,

    /// An S3-compatible endpoint instead of AWS (MinIO, Ceph...): https://HOST:PORT.
    #[arg(long, requires = "s3_url")]
    pub s3_endpoint: Option<String>,

    /// The bucket's region (else AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, requires = "s3_url")]
    pub s3_region: Option<String>,

    /// Keep only the newest N backups of this cluster under the prefix, deleting older ones
    /// after the upload.
    #[arg(long, requires = "s3_url", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
}

/// Make the data dir of one member of a NEW ensemble from a backup.
///
/// The new ensemble has a new cluster id: --cluster-id NEW, or the one the member certificate
/// given with --tls-cert names (issue the new ensemble's certificates first; never the backup's
/// cluster id, so the new members can never be mistaken for the old ones). The data dir must be
/// empty or missing. The backup is checked whole (header, SHA-256, tree) before anything is
/// written; a damaged one is refused and nothing is written.
///
/// The member gets the tree as of the backup's index, with --members as its configuration. The
/// old ensemble's sessions and their ephemeral nodes are dropped: they belonged to clients of
/// the old ensemble. Everything else (data, ACLs, versions, zxids, sequence counters) is kept,
/// and indexes go on rising from the backup's, so fencing tokens never repeat.
///
/// Restore every member of the new ensemble from the same backup with the same --members and
/// its own --id, then start each with `baton-ensemble --id N --data-dir DIR --members ...` (and
/// its certificates) as usual. Prints one JSON line describing what was written.
///
/// Example: baton-ensemble snapshot restore --from /backups/x.baton-backup --data-dir /data/1
/// --id 1 --members 1=10.0.0.1:2888,2=10.0.0.2:2888,3=10.0.0.3:2888 --tls-cert member-1.crt
#[derive(Parser, Debug, Clone)]
#[command(group(ArgGroup::new("identity").required(true).args(["cluster_id", "tls_cert"])))]
pub struct RestoreArgs {
    /// A backup file, s3://BUCKET/KEY, or s3://BUCKET/PREFIX/ for the newest .baton-backup
    /// directly under the prefix (by the time in its name).
    #[arg(long)]
    pub from: String,

    /// An S3-compatible endpoint instead of AWS: https://HOST:PORT.
    #[arg(long)]
    pub s3_endpoint: Option<String>,

    /// The bucket's region (else AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long)]
    pub s3_region: Option<String>,

    /// The member's data dir to make (missing or empty).
    #[arg(long)]
    pub data_dir: PathBuf,

    /// This member's id in the new ensemble.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,

    /// The new ensemble's members as ID=HOST:PORT of their peer address, comma-separated (as
    /// given to `baton-ensemble --members`).
    #[arg(long, value_delimiter = ',', required = true, value_parser = crate::config::parse_member)]
    pub members: Vec<(u64, String)>,

    /// The new ensemble's cluster id.
    #[arg(long)]
    pub cluster_id: Option<String>,

    /// This member's certificate of the new ensemble: its cluster id is taken from it (and its
    /// member id must be --id).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
}

/// Runs a `snapshot` subcommand: prints its JSON report on stdout; the error is for the user.
pub async fn run(args: SnapshotArgs) -> Result<(), String> {
    let report = match args.command {
        SnapshotCommand::Save(a) => serde_json::to_string(&save::save(a).await?),
        SnapshotCommand::Restore(a) => serde_json::to_string(&restore::restore(a).await?),
    };
    println!("{}", report.map_err(|e| e.to_string())?);
    Ok(())
}

impl SnapshotCommand {
    /// `save` or `restore`, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            SnapshotCommand::Save(_) => "save",
            SnapshotCommand::Restore(_) => "restore",
        }
    }
}
