#!/usr/bin/env python3
"""Checks every relative link and #anchor of the documentation; run by tests/scripts/docs.sh.

Two views of the same pages are checked, since both are read:

- the Markdown sources, as GitHub shows them: every Markdown file git knows of (tracked or new,
  not ignored). A relative link must name a file or folder of the repository; an anchor must be
  a heading of the Markdown file it points into (GitHub's rule for heading ids). A page of the
  book that includes another file (`{{#include FILE}}`) has that file's headings.
- the book as mdBook built it (docs/book): every href and src of every page. A link inside the
  book must name a file there, and its anchor an id in that file. A link that leaves the book
  must name a file or folder of the repository (docs/book lies where docs/src does, so the same
  relative path reaches it from either), and carry no anchor: mdBook rewrites a link to any
  `.md` file into `.html`, so a link out of the book to a Markdown file breaks there. Link to
  the folder instead (GitHub shows its README), or include the file in the book.

Prints every broken link with where it is, and exits 1 if there is any.
"""

import argparse
import html.parser
import os
import re
import subprocess
import sys
import urllib.parse

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target "title") and ![alt](target); the target may be wrapped in <...>.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)[^}]*\}\}")


def markdown_files(repo):
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md"],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout
    return sorted({os.path.join(repo, p) for p in out.split("\0") if p and os.path.isfile(os.path.join(repo, p))})


def prose(text):
    """The text with fenced code blocks and inline code blanked out (newlines kept, so offsets
    still give line numbers)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            out.append("")
        elif fence is not None:
            out.append("")
        else:
            out.append(INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line))
    return "\n".join(out)


def expanded(path, seen=()):
    """The file's text with mdBook's includes expanded (for the headings it shows)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()

    def include(m):
        target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        if target in seen or not os.path.isfile(target):
            return ""
        return expanded(target, seen + (path,))

    return INCLUDE.sub(include, text)


def plain(heading):
    """A heading's text as GitHub renders it: links to their text, code to its content."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "")


def github_anchors(path, cache={}):
    if path not in cache:
        anchors, counts = set(), {}
        fence = None
        for line in expanded(path).split("\n"):
            m = FENCE.match(line)
            if m:
                fence = m.group(1) if fence is None else (None if m.group(1) == fence else fence)
                continue
            if fence is not None:
                continue
            h = HEADING.match(line)
            if not h:
                continue
            slug = re.sub(r"[^\w\- ]", "", plain(h.group(2)).lower()).replace(" ", "-")
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = anchors
    return cache[path]


def check_markdown(repo, errors):
    files = markdown_files(repo)
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = prose(text)
        found = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(text)]
        offset = 0
        for line in text.split("\n"):
            ref = REFERENCE_DEF.match(line)
            if ref:
                found.append((offset, ref.group(1)))
            offset += len(line) + 1
        for start, target in sorted(found):
            problem = markdown_link_problem(repo, path, target)
            if problem:
                number = text.count("\n", 0, start) + 1
                errors.append(f"{os.path.relpath(path, repo)}:{number}: {target}: {problem}")
    return len(files)


def markdown_link_problem(repo, source, target):
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    if path_part.startswith("/"):
        return "absolute path: link relatively"
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path_part)) if path_part else source
    if not resolved.startswith(repo + os.sep) and resolved != repo:
        return "outside the repository"
    if not os.path.exists(resolved):
        return "no such file or folder"
    if anchor:
        if os.path.isdir(resolved) or not resolved.endswith(".md"):
            return "an anchor into something that is not a Markdown file"
        if anchor not in github_anchors(resolved):
            return f"no heading with the anchor #{anchor} in {os.path.relpath(resolved, repo)}"
    return None


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            if name in ("href", "src") and tag not in ("base",):
                self.links.append((self.getpos()[0], value))


def parse(path, cache={}):
    if path not in cache:
        page = Page()
        with open(path, encoding="utf-8") as f:
            page.feed(f.read())
        cache[path] = page
    return cache[path]


def check_book(repo, book, errors):
    pages = []
    for root, _, names in os.walk(book):
        pages += [os.path.join(root, n) for n in names if n.endswith(".html")]
    for path in sorted(pages):
        for line, target in parse(path).links:
            problem = html_link_problem(repo, book, path, target)
            if problem:
                errors.append(f"{os.path.relpath(path, repo)}:{line}: {target}: {problem}")
    return len(pages)


def html_link_problem(repo, book, source, target):
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part.split("?", 1)[0])
    if path_part.startswith("/"):
        return "absolute path: link relatively"
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path_part)) if path_part else source
    inside = resolved == book or resolved.startswith(book + os.sep)
    if inside:
        if os.path.isdir(resolved):
            resolved = os.path.join(resolved, "index.html")
        if not os.path.isfile(resolved):
            return "no such page in the book"
        if anchor and resolved.endswith(".html") and anchor not in parse(resolved).ids:
            return f"no id {anchor!r} in {os.path.relpath(resolved, book)}"
        return None
    if not (resolved.startswith(repo + os.sep) or resolved == repo):
        return "outside the repository"
    if not os.path.exists(resolved):
        hint = " (a link to a Markdown file outside the book: link its folder, or include it)" if resolved.endswith(".html") else ""
        return "no such file or folder in the repository" + hint
    if anchor:
        return "an anchor on a link out of the book (it cannot be checked, nor followed there)"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", required=True, help="the repository's top folder")
    parser.add_argument("--book", required=True, help="the built book (mdBook's build-dir)")
    args = parser.parse_args()
    repo = os.path.realpath(args.repo)
    book = os.path.realpath(args.book)
    errors = []
    markdown = check_markdown(repo, errors)
    html_pages = check_book(repo, book, errors)
    for e in errors:
        print(f"BROKEN LINK {e}", file=sys.stderr)
    print(f"docs links: {markdown} Markdown files and {html_pages} HTML pages checked, "
          f"{len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
