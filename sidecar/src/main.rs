//! `baton-sidecar`: the command line lives in the library (`cli`), which `baton-playground`
//! also runs as `baton-playground sidecar ...`.

fn main() -> std::process::ExitCode {
    baton_sidecar::cli::main(std::env::args_os())
}
