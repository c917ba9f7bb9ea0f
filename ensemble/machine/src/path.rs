//! ZooKeeper path rules (`PathUtils.validatePath`) and the string surgery the tree needs.
//!
//! Verified against Apache ZooKeeper 3.8.0: a path must start with '/', must not end with '/'
//! (except the root itself), has no empty, "." or ".." segments, and no character ZooKeeper
//! forbids (NUL, U+0001..U+001F, U+007F..U+009F, U+D800..U+F8FF, U+FFF0..U+FFFF). Java checks
//! UTF-16 code units, so every character above U+FFFF (a surrogate pair) is forbidden too.
//! "..." and ".a" are valid names.

/// The root znode's path.
pub const ROOT: &str = "/";

/// Paths the server owns: deleting them is refused with BadArguments (`DataTree.isSpecialPath`).
const SPECIAL_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// Why a path is invalid (all map to `BadArguments` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path must start with '/'")]
    NotAbsolute,
    #[error("path must not end with '/'")]
    TrailingSlash,
    #[error("empty node name")]
    EmptySegment,
    #[error("relative paths ('.' or '..') are not allowed")]
    Relative,
    #[error("invalid character {0:?}")]
    InvalidChar(char),
}

/// Checks `path` exactly as `PathUtils.validatePath` does.
pub fn validate_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path == ROOT {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(PathError::TrailingSlash);
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return Err(PathError::EmptySegment),
            "." | ".." => return Err(PathError::Relative),
            _ => {}
        }
        if let Some(c) = segment.chars().find(|&c| is_forbidden_char(c)) {
            return Err(PathError::InvalidChar(c));
        }
    }
    Ok(())
}

fn is_forbidden_char(c: char) -> bool {
    let c = c as u32;
    c <= 0x1f || (0x7f..=0x9f).contains(&c) || (0xd800..=0xf8ff).contains(&c) || c >= 0xfff0
}

/// Splits at the last '/' into (parent, name), as ZooKeeper's `lastIndexOf('/')` does: the
/// parent of "/a" is "" (ZooKeeper's other name for the root). `None` without any '/'.
pub fn split_last(path: &str) -> Option<(&str, &str)> {
    let at = path.rfind('/')?;
    Some((&path[..at], &path[at + 1..]))
}

/// The parent of a valid non-root path, with the root spelled "/".
pub fn parent_of(path: &str) -> &str {
    match split_last(path) {
        Some(("", _)) | None => ROOT,
        Some((parent, _)) => parent,
    }
}

/// ZooKeeper stores the root under both "" and "/"; we store it once, as "/".
pub fn normalize(path: &str) -> &str {
    if path.is_empty() { ROOT } else { path }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, name: &str) -> String {
    let mut out = String::with_capacity(parent.len() + 1 + name.len());
    out.push_str(parent);
    if !parent.ends_with('/') {
        out.push('/');
    }
    out.push_str(name);
    out
}

/// Whether deleting `path` is refused outright.
pub fn is_special(path: &str) -> bool {
    SPECIAL_PATHS.contains(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_zookeeper_accepts() {
        for p in [
            "/",
            "/a",
            "/a/b",
            "/v/...",
            "/v/.a",
            "/v/a.",
            "/v/\u{ff}",
            "/zookeeper/x",
        ] {
            assert_eq!(validate_path(p), Ok(()), "{p:?}");
        }
    }

    #[test]
    fn rejects_what_zookeeper_rejects() {
        let cases = [
            ("", PathError::Empty),
            ("v", PathError::NotAbsolute),
            ("/v/", PathError::TrailingSlash),
            ("//", PathError::TrailingSlash),
            ("/v//a", PathError::EmptySegment),
            ("/v/.", PathError::Relative),
            ("/v/..", PathError::Relative),
            ("/v/./a", PathError::Relative),
            ("/v/a\0b", PathError::InvalidChar('\0')),
            ("/v/a\u{1}", PathError::InvalidChar('\u{1}')),
            ("/v/a\u{19}", PathError::InvalidChar('\u{19}')),
            ("/v/a\u{7f}", PathError::InvalidChar('\u{7f}')),
            ("/v/a\u{9f}", PathError::InvalidChar('\u{9f}')),
            ("/v/a\u{f000}", PathError::InvalidChar('\u{f000}')),
            ("/v/a\u{fff0}", PathError::InvalidChar('\u{fff0}')),
            ("/v/a\u{1f600}", PathError::InvalidChar('\u{1f600}')),
        ];
        for (p, want) in cases {
            assert_eq!(validate_path(p), Err(want), "{p:?}");
        }
    }

    #[test]
    fn splits_like_last_index_of() {
        assert_eq!(split_last("/a"), Some(("", "a")));
        assert_eq!(split_last("/a/b"), Some(("/a", "b")));
        assert_eq!(split_last("/a/"), Some(("/a", "")));
        assert_eq!(split_last("/"), Some(("", "")));
        assert_eq!(split_last("a"), None);
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/a/b"), "/a");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
