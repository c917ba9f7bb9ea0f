//! `baton-ensemble`: the command line lives in the library (`cli`), which `baton-playground`
//! also runs as `baton-playground ensemble ...`.

fn main() -> std::process::ExitCode {
    baton_ensemble::cli::main(std::env::args_os())
}
