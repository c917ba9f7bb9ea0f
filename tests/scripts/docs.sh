#!/usr/bin/env bash
# Builds the documentation, the mdBook under docs/, into docs/book/ and checks every relative
# link and #anchor in the built HTML and in the repository's Markdown files
# (tests/scripts/docs-links.py). Fails on a warning or error from mdBook and on any broken link.
#
#   tests/scripts/docs.sh
#
# mdBook is installed when missing, at the version pinned below, with
# `cargo install --locked` into ${BATON_TOOLS:-~/.cache/baton-tools}/bin (under `nice -n 19`;
# without the `serve` and `watch` features, which only `mdbook serve` needs). Read the built book
# from the checkout (docs/book/index.html): links out of the book reach the repository's files.
# The sidecar's OpenAPI document is checked against the OpenAPI 3.1 schema with
# openapi-spec-validator (pinned below, in the tools' virtualenv, which test.sh makes).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd -P)
tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}
mdbook_version=0.5.4
mdbook=$tools/bin/mdbook
validator_version=0.9.0
validator=$tools/venv/bin/openapi-spec-validator

if [ "$("$mdbook" --version 2>/dev/null)" != "mdbook v$mdbook_version" ]; then
  echo "docs: installing mdbook $mdbook_version into $tools" >&2
  nice -n 19 cargo install mdbook --version "$mdbook_version" --locked \
    --no-default-features --features search --root "$tools"
fi

start=$(date +%s)
rm -rf "$repo/docs/book"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$mdbook" build "$repo/docs" >"$log" 2>&1; then
  cat "$log" >&2
  echo "docs: mdbook build failed" >&2
  exit 1
fi
if grep -E ' (WARN|ERROR) ' "$log" >&2; then
  echo "docs: mdbook build warned (above)" >&2
  exit 1
fi
if ! "$tools/venv/bin/pip" show openapi-spec-validator 2>/dev/null | grep -qx "Version: $validator_version"; then
  [ -x "$tools/venv/bin/pip" ] || python3 -m venv "$tools/venv"
  echo "docs: installing openapi-spec-validator $validator_version into $tools/venv" >&2
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check \
    "openapi-spec-validator==$validator_version"
fi
"$validator" "$repo/docs/src/reference/sidecar-openapi.json" >&2
python3 "$repo/tests/scripts/docs-links.py" --repo "$repo" --book "$repo/docs/book"
echo "docs: built docs/book and checked its links in $(($(date +%s) - start)) s"
