"""Every client library names exactly the sidecar's error codes: those of its OpenAPI document
(docs/src/reference/sidecar-openapi.json, generated from the sidecar's code by
`cargo run -p baton-docs`). Run by sdk/test.sh; exits 1 naming each code a library lacks or
invents."""

import json
import pathlib
import re
import sys

SDK = pathlib.Path(__file__).resolve().parent
DOCUMENT = SDK.parent / "docs/src/reference/sidecar-openapi.json"


def block(text: str, start: str, end: str) -> str:
    """The text from the first `start` to the next `end` after it."""
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


def read(path: str) -> str:
    return (SDK / path).read_text(encoding="utf-8")


def main() -> int:
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    want = {entry["code"] for entry in document["x-baton-error-codes"]}
    libraries = {
        "go (errors.go)": set(re.findall(r'= code\("(\w+)"\)', read("go/errors.go"))),
        "python (baton/errors.py)": set(
            re.findall(
                r'^    code = "(\w+)"$', read("python/baton/errors.py"), re.MULTILINE
            )
        ),
        "typescript (src/errors.ts, ERRORS)": set(
            re.findall(
                r"^\s+(\w+),?$",
                block(read("typescript/src/errors.ts"), "export const ERRORS", "};"),
                re.MULTILINE,
            )
        ),
        "java (BatonException.BY_CODE)": set(
            re.findall(
                r'Map\.entry\("(\w+)"',
                read("java/src/main/java/dev/baton/sdk/BatonException.java"),
            )
        ),
    }
    failed = False
    for name, have in libraries.items():
        missing, unknown = sorted(want - have), sorted(have - want)
        if missing or unknown:
            failed = True
            print(
                f"{name}: lacks {missing}, names codes the sidecar never sends {unknown}"
            )
    if failed:
        print(
            f"the sidecar's codes: {DOCUMENT.relative_to(SDK.parent)}", file=sys.stderr
        )
        return 1
    print(
        f"sdk contract: the four libraries name the sidecar's {len(want)} error codes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
