#!/usr/bin/env python3
"""Runs the commands of the docs' "Getting started" and "Tasks" pages, as the pages give them.

    tests/scripts/docs-run.py plan                        what runs, and how; fails on a block
                                                          that nothing runs (no machine needed)
    tests/scripts/docs-run.py local [--bin-dir DIR]       the pages that need no cluster
    tests/scripts/docs-run.py cluster --node-dir DIR [--image-dir DIR]
                                                          the pages that need one, on the real
                                                          node `control-plane.sh up DIR --node`
                                                          started; the last page stops it
                                                          (a failed run leaves it up, to
                                                          look at; test.sh's cleanup stops it)
    --only PAGE (repeatable, e.g. --only tasks/scale.md): run just those pages, for work on
    one page (the others are listed as "skipped", and the run says it was partial).
    --verbose: print each step's stdout and stderr (else only a failing step's).

Every fenced block of every page under docs/src/getting-started/ and docs/src/tasks/ is either
run or checked, or marked in the Markdown as not runnable here; a page or block the runner does
not know (a new page, a new kind of block) fails `plan`, `local` and `cluster` alike, so new
docs cannot escape. test.sh runs `local` once the binaries are built and `cluster` after the
node's tests, on the same node.

How each kind of block is taken:
  ```sh      run literally, in page order, with `bash -euo pipefail`, from the repository root,
             all the blocks of a page in ONE bash session (an `export` or a variable of one
             block reaches the next; background jobs are jobs of that shell), after only the
             substitutions of SUBSTITUTIONS below, each of which names the exact text it
             replaces and why. A block's stdout and stderr are kept; a failing block stops its
             page and the run, and its output is printed.
  ```sh,not-run-here
             not run; the HTML comment right above the block must say why (`<!-- not run
             here: ... -->`); the summary prints it. Only for what nothing here can stand in for.
  ```text    right after a ```sh block: that block's output. Each of its lines must be printed
             by the block, in that order (other lines may come between, e.g. a background
             process's log), compared after replacing every RFC 3339 time and every number,
             which differ from run to run, by placeholders.
  ```yaml    parsed (PyYAML when importable); then, when it starts with `spec:` (a part of a
             CoordinationEnsemble, as the pages show them), merged into
             operator/examples/coordinationensemble.yaml and created with
             `kubectl create --dry-run=server` in the page's namespace, so the API server
             checks it against the CRD's schema and rules without changing anything; when
             EXCERPTS names a file for the page, its lines (comments left out) must appear in
             that file in that order with the same indentation.

Where the pages run:
  local    playground.md, without-kubernetes.md, and backup-restore.md's "Outside Kubernetes"
           (after without-kubernetes.md's "One member", the member it backs up), each in a
           network, mount and PID namespace of its own (`unshare`, as root): its own
           127.0.0.1 (the fixed ports the pages use never meet another process's), an empty
           tmpfs on /tmp (the pages' /tmp/baton-* paths start empty), and every process it
           started gone when its session ends. Without root they run on the host, sharing its
           /tmp and ports: run them where nothing else uses the pages' ports and paths.
           PATH starts with --bin-dir (default target/release), whose binaries stand in for
           the cargo builds the pages show (SUBSTITUTIONS).
  cluster  on the real node (kubelet, containerd, runc; the project's image imported), with
           KUBECONFIG its admin kubeconfig and helm and kubectl from $BATON_TOOLS/bin, in this
           order, since the Tasks build on each other as their index orders them:
             fresh state (below)
             private-registry.md  an install of its own (a secret, then `helm install`), so
                                  it comes first, on a fresh cluster, and is then removed:
             fresh state
             install.md           the chart and the ensemble `demo` in `default`
             cert-manager.md      (not run here: needs cert-manager in the cluster)
             inject.md            `prod`: the chart's sidecarRbac, an ensemble, the app
             backup-restore.md    "In Kubernetes": the private CA's ConfigMap, the spec part
             scale.md             prod's ensemble to 5 members
             upgrade.md           the CRD and the chart (the same image: one build here)
             monitor.md           the chart's PodMonitors, alerts and dashboard
             admin-api.md         prod's member 0, through a port-forward
             uninstall.md         the ensembles, their volumes, the chart
             fresh state
             local-cluster.md     the page's own install and ensemble, then its `down`,
                                  which stops the node: so it is last
           "fresh state" (the runner's, not a page's): every CoordinationEnsemble deleted
           while an operator runs (finalizers removed from any left), the release `baton`
           uninstalled, the namespaces baton-system and prod deleted (prod's pods
           at once: the example app ignores SIGTERM), the ensembles' claims in
           default deleted and the CRD deleted: what a cluster without Baton has. So the node
           tests' install before (the same release name and namespace) does not matter.
           Files a page writes into the working directory (ca.crt, admin.crt, ...) are
           removed after it, when it created them and names them.

A Run's `setup` (before a page, in its session) and `check` (after it) are the runner's own
steps: a prerequisite a page states (the Prometheus Operator's CRDs before monitor.md, as
stand-ins), or an assertion of what a page says happens that its commands only print (the
leader pod's label, the joined member a voter). EXPECT names a line a block's output must
contain.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "src"
DIRS = ("getting-started", "tasks")

# The image the node imported (control-plane.sh up --node: the chart's default name) and the
# name the pages push it under, REGISTRY/baton:dev with REGISTRY = localhost: the node's
# containerd stands in for the registry the cluster pulls from.
IMAGE = "ghcr.io/baton-dev/baton:0.1.0"
PUSHED = "localhost/baton:dev"
PUSH = (
    'ctr --address "$DOCS_NODE_DIR/node/containerd/containerd.sock" -n k8s.io images tag'
    f" --force {IMAGE} {PUSHED}"
)
LOCAL_BUSYBOX = "localhost/baton-test/busybox:1"


@dataclass
class Sub:
    page: str
    old: str
    new: str
    why: str


# ONE table: (page, exact text in the page, what runs here instead, why). Applied in this
# order to each block of the page; each must match at least once (a stale line fails the run).
SUBSTITUTIONS = [
    Sub(
        "getting-started/playground.md",
        "cargo run --release --bin baton-playground --",
        "until_ctrl_c 'got it .* after .* crashed' \"$DOCS_BIN/baton-playground\"",
        "no cargo build in the runner (the test command builds every binary once, before; "
        "another build is minutes on 2 cores), and the playground runs until Ctrl-C: it is "
        "run from the built binary (what `cargo run` runs), and stopped with SIGINT once it "
        "printed the lock hand-over the page describes; it must then exit 0",
    ),
    Sub(
        "getting-started/playground.md",
        "cargo run --release --bin baton-playground",
        "until_ctrl_c 'got it .* after .* crashed' \"$DOCS_BIN/baton-playground\"",
        "the same, without options",
    ),
    Sub(
        "getting-started/without-kubernetes.md",
        "cargo build --release -p baton-ensemble",
        'test -x "$DOCS_BIN/baton-ensemble"',
        "no cargo build in the runner: the binary built before (--bin-dir)",
    ),
    Sub(
        "getting-started/without-kubernetes.md",
        "cargo build --release -p baton-sidecar",
        'test -x "$DOCS_BIN/baton-sidecar"',
        "no cargo build in the runner: the binary built before (--bin-dir)",
    ),
    Sub(
        "getting-started/without-kubernetes.md",
        "target/release/",
        "$DOCS_BIN/",
        "the binaries of --bin-dir (target/release by default; test.sh's debug build)",
    ),
    Sub(
        "tasks/install.md",
        "docker build -t REGISTRY/baton:dev . && docker push REGISTRY/baton:dev",
        PUSH,
        "no Docker and no registry here: tests/scripts/image.sh built the image from the "
        "Dockerfile and `control-plane.sh up --node` imported it into the node's containerd, "
        f"which stands in for the registry: the image is tagged {PUSHED} there",
    ),
    Sub(
        "tasks/install.md",
        "REGISTRY",
        "localhost",
        f"the registry: the node's containerd, where {PUSHED} is",
    ),
    Sub(
        "tasks/private-registry.md",
        "REGISTRY",
        "localhost",
        f"as for install.md; the image is there ({PUSHED}), so the kubelet never asks the "
        "registry and the pull secret is made and named but not used",
    ),
    Sub(
        "tasks/inject.md",
        "operator/examples/injected-deployment.yaml",
        f"<(sed 's#image: busybox:1.37#image: {LOCAL_BUSYBOX}#' "
        "operator/examples/injected-deployment.yaml)",
        "nothing is pulled on the node: the app's busybox:1.37 becomes the node's own busybox, "
        "with the sed line of local-cluster.md",
    ),
    Sub(
        "tasks/backup-restore.md",
        "kubectl -n NS ",
        "kubectl -n prod ",
        "NS, the ensemble's namespace: prod (inject.md's)",
    ),
    Sub(
        "tasks/backup-restore.md",
        "=minio-ca.pem",
        "=<(kubectl -n prod get configmap demo-ca -o jsonpath='{.data.ca\\.crt}')",
        "no MinIO here: the store's CA certificate is stood in for by a CA certificate at hand "
        "(the ensemble's)",
    ),
    Sub(
        "tasks/upgrade.md",
        "image.tag=NEW",
        "image.tag=dev",
        'one build here: the "new" release is the installed image, so nothing rolls '
        "(tests/e2e/tests/upgrade.rs rolls one release to another)",
    ),
    Sub(
        "getting-started/local-cluster.md",
        "tests/scripts/image.sh build target/image",
        'tests/scripts/image.sh size "$DOCS_IMAGE_DIR"',
        "the node was started with the image built before (test.sh builds it); `build` "
        "again is a cargo build check of the release binaries: print the built image instead",
    ),
    Sub(
        "getting-started/local-cluster.md",
        "/tmp/baton-cluster",
        '"$DOCS_NODE_DIR"',
        "one node per machine: the runner's, already up (`up` on a running DIR prints its "
        "kubeconfig again); the page's `down` stops it",
    ),
]

# yaml blocks that are a part of a file: the page's block -> the file.
EXCERPTS = {"tasks/inject.md": "operator/examples/injected-deployment.yaml"}

# Lines (regular expressions) a block's stdout must contain: (page, block's line) -> pattern.
# Keyed by the text of the block's first line, so an edit above it does not move it.
EXPECT = {
    ("tasks/install.md", "docker build"): r"demo-client\.default\.svc:2281",
    ("tasks/inject.md", "kubectl create namespace prod"): r"^web-\S+ ",
    ("tasks/admin-api.md", "NS=prod NAME=demo"): r'"leaderId":\d',
    ("tasks/scale.md", "kubectl -n prod scale"): r"^demo +5 +5 ",
    ("getting-started/without-kubernetes.md", "kill %2"): r'"leaderId":\d',
}

# Stand-ins for the Prometheus Operator's CRDs (what monitor.md says must be in the cluster
# first): the real group, kinds and version, any content (no Prometheus reads them here), as
# the kube node tests' stand-in.
MONITORING_CRDS = "\n".join(
    f"""kubectl apply -f - <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.monitoring.coreos.com}}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
EOF"""
    for kind, plural in (
        ("PodMonitor", "podmonitors"),
        ("PrometheusRule", "prometheusrules"),
    )
)

# poll SECONDS WHAT COMMAND...: until COMMAND succeeds (a runner check, not a page's).
PRELUDE = r"""
poll() {
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  until "$@"; do
    if ((SECONDS - start > limit)); then
      echo "docs-run: not within ${limit}s: $what" >&2
      return 1
    fi
    sleep 2
  done
  echo "docs-run: $what (after $((SECONDS - start))s)" >&2
}
# until_ctrl_c PATTERN COMMAND...: a command that runs until Ctrl-C, run in the background
# until its output has a line matching PATTERN (at most 120 s), then sent SIGINT (Ctrl-C); its
# exit status is the block's. Its output is printed when it has ended.
until_ctrl_c() {
  local pattern=$1 out start=$SECONDS pid
  shift
  out=$(mktemp)
  "$@" >"$out" 2>&1 &
  pid=$!
  until grep -q -- "$pattern" "$out"; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS - start > 120)); then
      cat "$out"
      echo "docs-run: no line matching '$pattern' from $1" >&2
      kill -INT "$pid" 2>/dev/null || true
      return 1
    fi
    sleep 0.2
  done
  echo "docs-run: '$pattern' after $((SECONDS - start))s; sending SIGINT (Ctrl-C)" >&2
  kill -INT "$pid"
  local rc=0
  wait "$pid" || rc=$?
  cat "$out"
  rm -f "$out"
  return "$rc"
}
"""

LEADER_LABELLED = r"""
leader_labelled() {
  [ "$(kubectl -n prod get pods -l baton.dev/role=leader -o name | grep -c '^pod/web-')" = 1 ] &&
    [ "$(kubectl -n prod get pods -l baton.dev/role=candidate -o name | grep -c '^pod/web-')" = 2 ]
}
poll 120 "one web pod labelled baton.dev/role=leader, two candidate" leader_labelled
"""

FOUR_VOTERS = r"""
voter4() { $ADMIN https://127.0.0.1:808$L/v1/members | grep -q '"id":4,[^}]*"role":"voter"'; }
poll 60 "member 4 a voter" voter4
"""

FIVE_VOTERS = r"""
five() { [ "$(kubectl -n prod get ce demo -o jsonpath='{.status.members}')" = "[1,2,3,4,5]" ]; }
poll 180 "prod's demo has voters 1 to 5" five
"""

RESTORED = r"""
test -n "$(ls -A /tmp/baton-new-1)"
echo "docs-run: /tmp/baton-new-1 holds the restored member's data"
"""

OPERATOR_UP = r"""
kubectl -n baton-system rollout status deployment/baton --timeout=3m
"""

FRESH = r"""
step() { echo "fresh state: $* ($((SECONDS - t))s)" >&2; t=$SECONDS; }
t=$SECONDS
if kubectl get crd coordinationensembles.baton.dev >/dev/null 2>&1; then
  if [ -n "$(kubectl get ce -A -o name)" ]; then
    kubectl delete ce --all -A --wait --timeout=3m || true
    for ce in $(kubectl get ce -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{" "}{end}'); do
      kubectl -n "${ce%/*}" patch ce "${ce#*/}" --type merge -p '{"metadata":{"finalizers":null}}'
    done
  fi
  step "ensembles deleted"
fi
if helm status baton -n baton-system >/dev/null 2>&1; then
  helm uninstall baton -n baton-system --wait --timeout 3m
  step "release uninstalled"
fi
kubectl delete namespace prod baton-system --ignore-not-found --wait=false
# A terminating namespace gets no new pods; the example app's busybox httpd ignores SIGTERM, so
# its pods would take their whole grace period: delete them at once.
kubectl -n prod delete pods --all --grace-period=0 --force 2>/dev/null || true
kubectl wait --for=delete namespace/prod namespace/baton-system --timeout=3m 2>/dev/null || true
step "namespaces deleted"
kubectl -n default delete pvc -l app.kubernetes.io/instance=demo --ignore-not-found --wait --timeout=2m
kubectl delete crd coordinationensembles.baton.dev --ignore-not-found --wait --timeout=2m
step "claims and CRD deleted"
! kubectl get namespace prod >/dev/null 2>&1 && ! kubectl get namespace baton-system >/dev/null 2>&1
"""


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    attrs: list[str]
    text: str
    section: str
    comment: str  # the HTML comment right above the fence, if any

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""


@dataclass
class Run:
    page: str
    env: str  # "local" or "cluster"
    section: str | None = None  # only the blocks under this "## " heading
    before: list[tuple[str, str]] = field(
        default_factory=list
    )  # (page, section) run first
    setup: str = ""
    check: str = ""
    namespace: str = "default"  # where the page's ensemble parts are created (dry run)
    fresh: bool = False  # the runner's fresh state first
    note: str = ""


RUNS = [
    Run("getting-started/playground.md", "local"),
    Run("getting-started/without-kubernetes.md", "local", check=FOUR_VOTERS),
    Run(
        "tasks/backup-restore.md",
        "local",
        section="Outside Kubernetes",
        before=[("getting-started/without-kubernetes.md", "One member")],
        check=RESTORED,
        note='after without-kubernetes.md\'s "One member": the member at 127.0.0.1:8080 it backs up',
    ),
    Run(
        "tasks/private-registry.md",
        "cluster",
        fresh=True,
        setup=PUSH,
        check=OPERATOR_UP,
        namespace="baton-system",
        note="an install of its own, on a fresh cluster; its image pushed first (install.md's first line)",
    ),
    Run("tasks/install.md", "cluster", fresh=True, check=OPERATOR_UP),
    Run("tasks/cert-manager.md", "cluster"),
    Run("tasks/inject.md", "cluster", check=LEADER_LABELLED),
    Run("tasks/use-from-languages.md", "cluster"),
    Run(
        "tasks/backup-restore.md", "cluster", section="In Kubernetes", namespace="prod"
    ),
    Run("tasks/scale.md", "cluster", check=FIVE_VOTERS),
    Run("tasks/upgrade.md", "cluster", check=OPERATOR_UP),
    Run(
        "tasks/monitor.md",
        "cluster",
        setup=MONITORING_CRDS,
        note="the Prometheus Operator's CRDs first, as the page says: schemaless stand-ins",
    ),
    Run("tasks/admin-api.md", "cluster"),
    Run("tasks/uninstall.md", "cluster"),
    Run("getting-started/local-cluster.md", "cluster", fresh=True),
]
# Pages without commands, run by nothing.
NO_BLOCKS = {"getting-started/index.md", "tasks/index.md"}

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`]*)$")
COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)


def parse(page: str) -> list[Block]:
    lines = (DOCS / page).read_text().splitlines()
    blocks, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        m = FENCE.match(line)
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        j = i + 1
        body = []
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                break
            body.append(lines[j].removeprefix(indent))
            j += 1
        if j == len(lines):
            sys.exit(f"{page}:{i + 1}: unclosed code block")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        comment = ""
        if k >= 0 and lines[k].strip().endswith("-->"):
            start = k
            while start > 0 and "<!--" not in lines[start]:
                start -= 1
            c = COMMENT.search("\n".join(lines[start : k + 1]))
            comment = " ".join(c.group(1).split()) if c else ""
        parts = [p.strip() for p in info.split(",")] if info else [""]
        blocks.append(
            Block(page, i + 1, parts[0], parts[1:], "\n".join(body), section, comment)
        )
        i = j + 1
    return blocks


def pages() -> list[str]:
    return sorted(f"{d}/{p.name}" for d in DIRS for p in (DOCS / d).glob("*.md"))


def blocks_of(run: Run, all_blocks: dict[str, list[Block]]) -> list[Block]:
    return [
        b
        for b in all_blocks[run.page]
        if run.section is None or b.section == run.section
    ]


def how(block: Block) -> tuple[str, list[Sub]]:
    """What the runner does with a block: ('literal'|'substituted'|..., substitutions used)."""
    if "not-run-here" in block.attrs:
        return "not-run-here", []
    if block.lang == "sh":
        used = [
            s
            for s in SUBSTITUTIONS
            if s.page == block.page and s.old in substitute_upto(block, s)
        ]
        return ("substituted" if used else "literal"), used
    if block.lang == "text":
        return "output of the block before", []
    if block.lang == "yaml":
        if block.text.startswith("spec:"):
            return "ensemble part: kubectl create --dry-run=server", []
        return f"excerpt of {EXCERPTS.get(block.page, '?')}", []
    return f"unknown ({block.lang or 'no language'})", []


def substitute_upto(block: Block, until: Sub) -> str:
    """The block's text with the substitutions before `until` applied."""
    text = block.text
    for s in SUBSTITUTIONS:
        if s is until:
            return text
        if s.page == block.page:
            text = text.replace(s.old, s.new)
    return text


def substituted(block: Block) -> str:
    text = block.text
    for s in SUBSTITUTIONS:
        if s.page == block.page:
            text = text.replace(s.old, s.new)
    return text


def check_plan(all_blocks: dict[str, list[Block]]) -> list[str]:
    """Everything the runner cannot vouch for: unknown pages and blocks, unused substitutions."""
    problems = []
    run_pages = {r.page for r in RUNS}
    covered = set()
    for run in RUNS:
        if run.page not in all_blocks:
            problems.append(f"{run.page}: in RUNS but not a page")
            continue
        chosen = blocks_of(run, all_blocks)
        if run.section is not None and not chosen:
            problems.append(f"{run.page}: no blocks under '## {run.section}'")
        covered.update((b.page, b.line) for b in chosen)
        for page, section in run.before:
            if not [b for b in all_blocks.get(page, []) if b.section == section]:
                problems.append(
                    f"{run.page}: its prerequisite {page} '## {section}' has no blocks"
                )
    for page, blocks in all_blocks.items():
        if page not in run_pages and page not in NO_BLOCKS and blocks:
            problems.append(
                f"{page}: a page with code blocks the runner does not know: add it to RUNS"
            )
        if page in NO_BLOCKS and blocks:
            problems.append(f"{page}: has code blocks now: add it to RUNS")
        previous = None
        for b in blocks:
            kind, _ = how(b)
            if (b.page, b.line) not in covered and page in run_pages:
                problems.append(
                    f"{b.where}: no run covers this block (its section: '{b.section}')"
                )
            if kind == "not-run-here" and not b.comment:
                problems.append(
                    f"{b.where}: not-run-here without an HTML comment above saying why"
                )
            if kind.startswith("unknown"):
                problems.append(
                    f"{b.where}: a ```{b.lang} block the runner does not know"
                )
            if b.lang == "text" and (
                previous is None
                or previous.lang != "sh"
                or "not-run-here" in previous.attrs
            ):
                problems.append(
                    f"{b.where}: a text block not right after a run sh block"
                )
            if (
                b.lang == "yaml"
                and not b.text.startswith("spec:")
                and b.page not in EXCERPTS
            ):
                problems.append(
                    f"{b.where}: a yaml block neither a spec part nor in EXCERPTS"
                )
            previous = b
    for s in SUBSTITUTIONS:
        if not any(
            s.old in substitute_upto(b, s)
            for b in all_blocks.get(s.page, [])
            if b.lang == "sh"
        ):
            problems.append(
                f"{s.page}: the substitution of {s.old!r} matches nothing (stale?)"
            )
    for page, first in EXPECT:
        if not any(b.first.startswith(first) for b in all_blocks.get(page, [])):
            problems.append(
                f"{page}: EXPECT names a block starting {first!r}, which is not there"
            )
    return problems


def expected(block: Block) -> str | None:
    """The EXPECT pattern of a block, if any."""
    for (page, first), pattern in EXPECT.items():
        if page == block.page and block.first.startswith(first):
            return pattern
    return None


def normalise(line: str) -> str:
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<time>", line.strip())
    return re.sub(r"\d+", "<n>", line)


def output_matches(expected: str, got: str) -> str | None:
    """None when every expected line is printed, in order; else what is missing."""
    lines = [normalise(x) for x in got.splitlines()]
    at = 0
    for want in expected.splitlines():
        w = normalise(want)
        while at < len(lines) and lines[at] != w:
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def check_yaml(block: Block, namespace: str) -> str:
    """Checks a yaml block; returns bash to run in the page's session ('' when done here)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        yaml = None
    if yaml is not None:
        yaml.safe_load(block.text)
    if block.text.startswith("spec:"):
        body = substituted(block).replace("'", "'\\''")
        return (
            "kubectl patch --local -f operator/examples/coordinationensemble.yaml --type merge "
            f"-p '{body}' -o yaml | sed 's/^  name: demo$/  name: docs-run-part/' | "
            f"kubectl create --dry-run=server -n {namespace} -f -"
        )
    file = REPO / EXCERPTS[block.page]
    strip = re.compile(r"\s+#.*$")

    def content(text: str) -> list[str]:
        return [
            strip.sub("", x).rstrip()
            for x in text.splitlines()
            if x.strip() and not x.strip().startswith("#")
        ]

    have, at = content(file.read_text()), 0
    for want in content(block.text):
        while at < len(have) and have[at] != want:
            at += 1
        if at == len(have):
            raise SystemExit(
                f"{block.where}: the line {want!r} is not in {file.relative_to(REPO)} (in this order)"
            )
        at += 1
    return ""


class Failed(Exception):
    pass


def bash_session(
    script: str, env: dict, isolate: bool, log: Path, timeout: int
) -> tuple[int, str, str]:
    """Runs a script in one bash session; (status, stdout, stderr)."""
    if isolate:
        # The checkout and the binaries may themselves live under /tmp (a clone made there):
        # they are bound back into the fresh /tmp at the same paths, through a view of the
        # host's /tmp taken before the tmpfs hides it.
        keep = sorted(
            {
                str(path)
                for path in (REPO.resolve(), Path(env.get("DOCS_BIN", "/")).resolve())
                if path.is_relative_to("/tmp") and path != Path("/tmp")
            }
        )
        wrap = (
            "script=$1; shift; ip link set lo up; host_tmp=/run/docs-run-host-tmp; "
            'if [ "$#" -gt 0 ]; then mkdir -p "$host_tmp"; mount --bind /tmp "$host_tmp"; fi; '
            "mount -t tmpfs -o mode=1777 tmpfs /tmp; "
            'for p in "$@"; do mkdir -p "$p"; mount --bind "$host_tmp/${p#/tmp/}" "$p"; done; '
            'exec bash -euo pipefail -c "$script" docs-run'
        )
        argv = [
            "unshare",
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "bash",
            "-ec",
            wrap,
            "wrap",
            script,
            *keep,
        ]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", script, "docs-run"]
    out, err = Path(f"{log}.out"), Path(f"{log}.err")
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            e.write(f"\ndocs-run: the session ran longer than {timeout}s: stopped\n")
            rc = -1
        finally:
            # Background jobs of the session (a port-forward, members on the host) are in its
            # process group: stop them with it.
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                time.sleep(1)
            proc.wait()
    return rc, out.read_text(errors="replace"), err.read_text(errors="replace")


MARK = "@@docs-run {}@@"


def split_marks(text: str) -> dict[str, str]:
    parts, name, cur = {}, None, []
    for line in text.splitlines():
        m = re.fullmatch(r"@@docs-run (\S+)@@( [\d.,]+)?", line)
        if m:
            if name is not None:
                parts[name] = "\n".join(cur)
            name, cur = m.group(1), []
        elif name is not None:
            cur.append(line)
    if name is not None:
        parts[name] = "\n".join(cur)
    return parts


@dataclass
class Result:
    block: Block
    how: str
    status: str  # ok, FAILED, not run, skipped
    seconds: float | None = None
    detail: str = ""


def label(mark: str) -> str:
    """How a step that is not one of the page's blocks is shown."""
    if mark.startswith("pre:"):
        return f"(before) {mark[4:]}"
    return f"(runner) {mark}"


def indent(text: str) -> str:
    return "\n".join("      " + x for x in text.strip("\n").splitlines())


def run_page(
    run: Run,
    all_blocks,
    env: dict,
    workdir: Path,
    isolate: bool,
    results: list[Result],
    verbose: bool,
) -> None:
    blocks = blocks_of(run, all_blocks)
    pre = [
        b
        for page, section in run.before
        for b in all_blocks[page]
        if b.section == section
    ]
    steps: list[tuple[str, str]] = []  # (mark, bash)
    if run.setup:
        steps.append(("setup", run.setup))
    for b in pre:
        if b.lang == "sh":
            steps.append((f"pre:{b.page}:{b.line}", substituted(b)))
    shown: list[Result] = []
    for b in blocks:
        kind, _ = how(b)
        r = Result(b, kind, "not run")
        shown.append(r)
        if kind == "not-run-here":
            r.detail = b.comment
        elif b.lang == "sh":
            steps.append((str(b.line), substituted(b)))
        elif b.lang == "yaml":
            bash = check_yaml(b, run.namespace)
            if bash:
                steps.append((str(b.line), bash))
            else:
                r.status = "ok"
    if run.check:
        steps.append(("check", run.check))
    results.extend(shown)
    print(
        f"\n== {run.page}{' (' + run.section + ')' if run.section else ''}: {run.env}"
        f"{', ' + run.note if run.note else ''}",
        flush=True,
    )
    if not [m for m, _ in steps if m not in ("setup", "check")]:
        for r in shown:
            print(
                f"  {r.block.where:48} {r.block.lang:5} {r.how:28} {r.status}  {r.detail}",
                flush=True,
            )
        if not shown:
            print("  (no code blocks)", flush=True)
        return
    script = [PRELUDE]
    for mark, bash in steps:
        m = MARK.format(mark)
        script.append(
            f"printf '\\n%s %s\\n' '{m}' \"$EPOCHREALTIME\" >&2\nprintf '\\n{m}\\n'\n{bash}\n"
        )
    script.append(
        f"printf '\\n{MARK.format('end')}\\n'\nprintf '\\n%s %s\\n' '{MARK.format('end')}' \"$EPOCHREALTIME\" >&2\n"
    )
    log = workdir / re.sub(r"\W", "_", f"{run.page}-{run.section or 'all'}")
    before = set(os.listdir(REPO))
    start = time.monotonic()
    rc, out, err = bash_session(
        "".join(script),
        env,
        isolate and run.env == "local",
        log,
        timeout=1200 if run.env == "cluster" else 300,
    )
    elapsed = time.monotonic() - start
    # Files the page wrote into the working directory, which it names.
    page_text = " ".join(b.text for b in blocks)
    for name in set(os.listdir(REPO)) - before:
        if (REPO / name).is_file() and re.search(
            rf"(^|[\s>=/]){re.escape(name)}\b", page_text
        ):
            (REPO / name).unlink()
    outs = split_marks(out)
    times = {}
    for line in err.splitlines():
        m = re.match(r"@@docs-run (\S+)@@ ([\d.]+)$", line.replace(",", "."))
        if m:
            times[m.group(1)] = float(m.group(2))
    order = [m for m, _ in steps] + ["end"]
    started = [m for m in order if m in times]
    failed_at = started[-1] if rc != 0 and started else None
    for r in shown:
        mark = str(r.block.line)
        if r.status == "ok" or mark not in times:
            continue
        nxt = order[order.index(mark) + 1]
        if mark == failed_at:
            r.status = "FAILED"
            continue
        r.status = "ok"
        r.seconds = times.get(nxt, times[mark]) - times[mark]
        want = expected(r.block)
        if want and not re.search(want, outs.get(mark, ""), re.MULTILINE):
            r.status, r.detail = "FAILED", f"its output has no line matching {want!r}"
    # text blocks: the output of the sh block before them.
    for prev, r in itertools.pairwise(shown):
        if r.block.lang == "text" and prev.status == "ok":
            missing = output_matches(r.block.text, outs.get(str(prev.block.line), ""))
            r.status = "ok" if missing is None else "FAILED"
            if missing is not None:
                r.detail = f"not printed: {missing}"
    for r in shown:
        secs = f" {r.seconds:.1f}s" if r.seconds is not None else ""
        print(
            f"  {r.block.where:48} {r.block.lang:5} {r.how:28} {r.status}{secs}"
            f"{'  ' + r.detail if r.detail and r.status != 'not run' else ''}",
            flush=True,
        )
    for mark in order[:-1]:
        if not mark.isdigit():  # the runner's own steps: setup, prerequisites, checks
            state = "ok" if mark in times and mark != failed_at else "FAILED"
            if mark not in times:
                state = "not run"
            took = times.get(order[order.index(mark) + 1], 0) - times.get(mark, 0)
            print(
                f"  {label(mark):48} {'':5} {'':28} {state}"
                f"{f' {took:.1f}s' if state == 'ok' else ''}",
                flush=True,
            )
    if verbose:
        for mark in order[:-1]:
            print(f"  --- {mark}: stdout\n{indent(outs.get(mark, ''))}", flush=True)
            print(
                f"  --- {mark}: stderr\n{indent(split_marks(err).get(mark, ''))}",
                flush=True,
            )
    bad = [r for r in shown if r.status == "FAILED"]
    if failed_at in ("setup", "check") or (failed_at or "").startswith("pre:"):
        bad.append(Result(blocks[0], failed_at, "FAILED"))
    if rc != 0 and not bad:
        bad.append(Result(blocks[0], "session", "FAILED"))
    print(f"  ({elapsed:.0f}s)", flush=True)
    if bad:
        print(
            f"\n--- {run.page}: failed at '{failed_at}' (exit status {rc})",
            file=sys.stderr,
        )
        if failed_at and failed_at.isdigit():
            print("--- the block, as run:", file=sys.stderr)
            print(dict(steps)[failed_at], file=sys.stderr)
        part = split_marks(out).get(failed_at or "", out)
        epart = split_marks(err).get(failed_at or "", err)
        print(
            "--- its stdout (tail):\n" + "\n".join(part.splitlines()[-40:]),
            file=sys.stderr,
        )
        print(
            "--- its stderr (tail):\n" + "\n".join(epart.splitlines()[-60:]),
            file=sys.stderr,
        )
        print(f"--- the whole session: {log}.out and {log}.err", file=sys.stderr)
        for r in bad:
            if r.detail:
                print(f"--- {r.block.where}: {r.detail}", file=sys.stderr)
        raise Failed(run.page)


def summary(results: list[Result], elapsed: float, partial: bool) -> None:
    print("\n== docs-run: summary")
    for r in results:
        note = ""
        if r.how == "substituted":
            note = "; ".join(f"{s.old!r} -> {s.new!r}" for s in how(r.block)[1])
        elif r.detail:
            note = r.detail
        print(
            f"  {r.block.where:48} {r.block.lang:5} {r.status:8} {r.how}{': ' + note if note else ''}"
        )
    print(f"  {elapsed:.0f}s{' (a partial run: --only)' if partial else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["plan", "local", "cluster"])
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--node-dir")
    ap.add_argument("--image-dir", default="target/image")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--verbose", action="store_true", help="print every step's output")
    args = ap.parse_args()

    all_blocks = {p: parse(p) for p in pages()}
    problems = check_plan(all_blocks)
    if problems:
        print("docs-run: the pages and the runner disagree:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    if args.what == "plan":
        for run in RUNS:
            print(
                f"{run.page}{' (' + run.section + ')' if run.section else ''}: {run.env}"
                f"{', after ' + ', '.join(f'{p} ({s})' for p, s in run.before) if run.before else ''}"
                f"{', fresh state first' if run.fresh else ''}"
            )
            for b in blocks_of(run, all_blocks):
                if b.lang == "yaml":
                    check_yaml(b, run.namespace)  # parsed; an excerpt checked here
                kind, used = how(b)
                print(f"  {b.where:48} {b.lang:5} {kind}")
                for s in used:
                    print(f"      {s.old!r} -> {s.new!r}\n        ({s.why})")
                if kind == "not-run-here":
                    print(f"      ({b.comment})")
        return 0

    env = dict(os.environ)
    tools = Path(os.environ.get("BATON_TOOLS", Path.home() / ".cache" / "baton-tools"))
    bin_dir = (REPO / args.bin_dir).resolve()
    env["DOCS_BIN"] = str(bin_dir)
    env["PATH"] = f"{bin_dir}:{tools / 'bin'}:{env['PATH']}"
    isolate = False
    if args.what == "local":
        for b in ("baton-ensemble", "baton-sidecar", "baton-playground"):
            if not os.access(bin_dir / b, os.X_OK):
                print(
                    f"docs-run: no {bin_dir / b}: build the binaries first",
                    file=sys.stderr,
                )
                return 1
        isolate = os.geteuid() == 0 and shutil.which("unshare") is not None
        if not isolate:
            print(
                "docs-run: NOTE not root: the local pages run on the host (/tmp, ports shared)"
            )
    else:
        if not args.node_dir:
            ap.error(
                "cluster needs --node-dir (the DIR of `control-plane.sh up DIR --node`)"
            )
        node = Path(args.node_dir).resolve()
        if not (node / "admin.kubeconfig").exists() or not (node / "node").is_dir():
            print(
                f"docs-run: {node} holds no node (control-plane.sh up {node} --node)",
                file=sys.stderr,
            )
            return 1
        env["DOCS_NODE_DIR"] = str(node)
        env["DOCS_IMAGE_DIR"] = str((REPO / args.image_dir).resolve())
        env["KUBECONFIG"] = str(node / "admin.kubeconfig")

    runs = [r for r in RUNS if r.env == args.what]
    unknown = [o for o in args.only if o not in {r.page for r in runs}]
    if unknown:
        ap.error(f"--only {unknown}: not a {args.what} page")
    workdir = Path(tempfile.mkdtemp(prefix="docs-run-"))
    results: list[Result] = []
    start = time.monotonic()
    status = 0
    try:
        for run in runs:
            if args.only and run.page not in args.only:
                results.extend(
                    Result(b, how(b)[0], "skipped") for b in blocks_of(run, all_blocks)
                )
                continue
            if run.fresh:
                t = time.monotonic()
                print("\n== fresh state (the runner's)", flush=True)
                rc, out, err = bash_session(
                    PRELUDE + FRESH, env, False, workdir / "fresh", 600
                )
                if args.verbose:
                    print(indent(out + err), flush=True)
                else:
                    for line in err.splitlines():
                        if line.startswith("fresh state: "):
                            print(f"  {line[13:]}", flush=True)
                if rc != 0:
                    print(out[-3000:] + err[-3000:], file=sys.stderr)
                    print(
                        "docs-run: could not bring the cluster to a fresh state",
                        file=sys.stderr,
                    )
                    return 1
                print(f"  ({time.monotonic() - t:.0f}s)", flush=True)
            run_page(run, all_blocks, env, workdir, isolate, results, args.verbose)
    except Failed as failed:
        print(f"docs-run: {failed} failed (above)", file=sys.stderr)
        status = 1
    summary(results, time.monotonic() - start, bool(args.only))
    if status == 0:
        shutil.rmtree(workdir)
    return status


if __name__ == "__main__":
    sys.exit(main())
