//! The committed reference pages must be what the code generates: a flag, CRD field, Helm value or
//! metric cannot exist in the code and not in the docs, or the other way round.

#[test]
fn reference_is_current() {
    let pages = baton_docs::pages().expect("generate the reference");
    let dir = baton_docs::reference_dir();
    let mut stale = Vec::new();
    for page in &pages {
        let path = dir.join(page.file);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some((line, was, is)) = baton_docs::first_difference(&committed, &page.text) {
            stale.push(format!(
                "docs/src/reference/{} differs from the code at line {line}:\n  committed: {was}\n  \
                 generated: {is}",
                page.file
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nrun `{}` to update the reference",
        stale.join("\n"),
        baton_docs::UPDATE_COMMAND
    );
}

#[test]
fn every_page_is_in_the_table_of_contents() {
    let summary = std::fs::read_to_string(baton_docs::repo_root().join("docs/src/SUMMARY.md"))
        .expect("read docs/src/SUMMARY.md");
    let pages = baton_docs::pages().expect("generate the reference");
    for page in &pages {
        if !page.file.ends_with(".md") {
            // A document beside the pages (the OpenAPI file): some page must link it.
            assert!(
                pages
                    .iter()
                    .any(|p| p.text.contains(&format!("]({})", page.file))),
                "no reference page links {}",
                page.file
            );
            continue;
        }
        assert!(
            summary.contains(&format!("(reference/{})", page.file)),
            "docs/src/SUMMARY.md does not link reference/{}",
            page.file
        );
    }
}

/// Every `"baton.dev/..."` key the operator, the sidecar and the ensemble have in their code is
/// in the annotations and labels tables, so on the generated page.
#[test]
fn every_baton_key_in_the_code_is_documented() {
    let root = baton_docs::repo_root();
    let dirs = [
        root.join("operator/src"),
        root.join("sidecar/src"),
        root.join("ensemble/server/src"),
    ];
    let dirs: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
    let keys = baton_docs::metadata::literal_keys(&dirs);
    assert!(
        keys.iter().any(|(k, _)| k == "baton.dev/inject"),
        "{keys:?}"
    );
    let missing: Vec<String> = keys
        .iter()
        .filter(|(k, _)| !baton_docs::metadata::documented(k))
        .map(|(k, file)| format!("{k} ({file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "keys in the code but in no table (operator/src/metadata_keys.rs or \
         baton_sidecar::pod::POD_KEYS): {missing:?}"
    );
}

#[test]
fn differences_name_the_first_line() {
    assert_eq!(baton_docs::first_difference("a\nb\n", "a\nb\n"), None);
    assert_eq!(
        baton_docs::first_difference("a\nb\nc\n", "a\nx\nc\n"),
        Some((2, "b".into(), "x".into()))
    );
    assert_eq!(
        baton_docs::first_difference("a\n", "a\nb\n"),
        Some((2, "(end of file)".into(), "b".into()))
    );
}
