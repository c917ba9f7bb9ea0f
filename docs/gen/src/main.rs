//! Writes the generated reference pages into docs/src/reference/ (the `reference_is_current`
//! test checks them).

use std::process::ExitCode;

fn main() -> ExitCode {
    let pages = match baton_docs::pages() {
        Ok(pages) => pages,
        Err(e) => {
            eprintln!("baton-docs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = baton_docs::reference_dir();
    for page in pages {
        let path = dir.join(page.file);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == page.text) {
            continue;
        }
        if let Err(e) = std::fs::write(&path, &page.text) {
            eprintln!("baton-docs: write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        eprintln!("baton-docs: wrote docs/src/reference/{}", page.file);
    }
    ExitCode::SUCCESS
}
