#!/usr/bin/env bash
# The project's image, built without a registry or a Docker daemon, from the repository's
# Dockerfile as the source of truth.
#
#   tests/scripts/image.sh build OUT_DIR   build (or reuse) the image; print its size
#   tests/scripts/image.sh check OUT_DIR   build, then run tests/e2e/tests/image.rs against it
#   tests/scripts/image.sh plan            print what the script read from the Dockerfile
#   tests/scripts/image.sh size OUT_DIR    print the size of an image built before
#   tests/scripts/image.sh packages        apt-install the tools `build` needs, if missing
#
# What `build` does, each step read from the Dockerfile (parsed line by line; an instruction, flag
# or build-stage command the script does not understand stops it, so the two cannot drift apart
# silently):
#   1. the build stage's `cargo build` with its environment, under `nice -n 19`, into the
#      workspace's target dir (the toolchain must be the build stage's Rust version);
#   2. the run stage's base, debian:SUITE-slim, made from Debian's packages with mmdebstrap
#      (variant minbase, with the documentation, manual pages and translations left out as the
#      slim images do), cached under ${BATON_CACHE:-~/.cache/baton}/image/base-<hash>.tar;
#   3. each RUN of the run stage executed verbatim with /bin/sh -c in a chroot of that base (its
#      own mount namespace; /dev, /proc and the host's DNS configuration lent to it, as a builder
#      lends them), one layer per RUN, cached under .../image/run-<hash>/;
#   4. the COPY --from=build of the binaries as one layer, and the image config from LABEL,
#      USER, EXPOSE, ENV, WORKDIR, ENTRYPOINT and CMD, with umoci.
# OUT_DIR gets:
#   oci/              the OCI image layout, tagged with the chart's tag (charts/baton: image.tag,
#                     default appVersion) and `latest` (the operator's --default-image default)
#   baton-image.tar   a docker-archive of it named REPOSITORY:TAG and REPOSITORY:latest, which
#                     `ctr -n k8s.io images import` and `docker load` take
#   bundle/           the image unpacked as an OCI runtime bundle (rootfs/, config.json), which
#                     runc runs and tests/e2e/tests/image.rs inspects
# A second `build` with nothing changed reuses everything (cargo still checks the binaries).
# The cached base follows the Debian mirror of the day it was made: remove
# ~/.cache/baton/image/ to take newer packages.
#
# Needs root (mmdebstrap's root mode, chroot, files owned by root in the layers) and apt-installs
# mmdebstrap, umoci, skopeo and runc when missing.

# The Dockerfile's values (rust_version, cargo_args, run_cmds, ...) come from eval of
# parse_dockerfile's output.
# shellcheck disable=SC2154
set -euo pipefail
shopt -s inherit_errexit

repo=$(cd "$(dirname "$0")/../.." && pwd -P)
dockerfile=$repo/Dockerfile
cache=${BATON_CACHE:-$HOME/.cache/baton}/image
self_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)

log() { echo "image: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

usage() {
  sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

# The Dockerfile, parsed: prints bash assignments (see the end of the Python program), or fails
# naming the line it does not understand.
parse_dockerfile() {
  python3 - "$dockerfile" <<'PY'
import json, re, shlex, sys

path = sys.argv[1]
where = 0


def die(msg):
    print(f"image: error: {path}:{where}: {msg}", file=sys.stderr)
    sys.exit(1)


# Logical lines: continuations joined, comments (also inside a continued instruction) dropped.
instructions = []
buf, start = None, 0
for n, raw in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
    s = raw.strip()
    if not s or s.startswith("#"):
        continue
    if buf is None:
        buf, start = "", n
    line = raw.rstrip()
    if line.endswith("\\"):
        buf += line[:-1] + " "
        continue
    buf += line
    parts = buf.strip().split(None, 1)
    instructions.append((start, parts[0].upper(), parts[1].strip() if len(parts) > 1 else ""))
    buf = None
if buf is not None:
    where = start
    die("the file ends inside a continued instruction")

# Stages.
stages = []
for n, kw, rest in instructions:
    where = n
    if kw == "FROM":
        words = rest.split()
        if any(w.startswith("--") for w in words):
            die(f"FROM flags are not understood: {rest}")
        if len(words) == 3 and words[1].upper() == "AS":
            stages.append({"image": words[0], "name": words[2], "line": n, "body": []})
        elif len(words) == 1:
            stages.append({"image": words[0], "name": None, "line": n, "body": []})
        else:
            die(f"FROM not understood: {rest}")
    elif not stages:
        die(f"{kw} before the first FROM")
    else:
        stages[-1]["body"].append((n, kw, rest))
if len(stages) != 2:
    where = stages[0]["line"] if stages else 0
    die(f"expected two stages (build, run), found {len(stages)}")
build, run = stages

# --- build stage: FROM rust:X-SUITE AS build, WORKDIR, COPY . ., one RUN with cargo build ---------
where = build["line"]
m = re.fullmatch(r"rust:(\d+\.\d+(?:\.\d+)?)-(\w+)", build["image"])
if not m or not build["name"]:
    die(f"the build stage's FROM is not 'rust:VERSION-SUITE AS NAME': {build['image']}")
rust_version, build_suite = m.group(1), m.group(2)
workdir = "/"
cargo_env, cargo_args, out_dir, binaries = [], None, None, []
build_env = []
for n, kw, rest in build["body"]:
    where = n
    if kw == "WORKDIR":
        if not rest.startswith("/"):
            die("a relative WORKDIR is not understood")
        workdir = rest
    elif kw == "ENV":
        words = shlex.split(rest)
        if not all("=" in w for w in words):
            die("ENV KEY VALUE (without =) is not understood")
        build_env += words
    elif kw == "COPY":
        if shlex.split(rest) not in ([".", "."], [".", "./"], [".", workdir], [".", workdir + "/"]):
            die(f"the build stage's COPY must copy the context ('COPY . .'): {rest}")
    elif kw == "RUN":
        words = shlex.split(rest)
        while words and words[0].startswith("--"):
            if not words[0].startswith("--mount=type=cache,"):
                die(f"RUN flag not understood: {words[0]}")
            words.pop(0)
        if any(re.search(r"[;|<>`$]|&(?!&)", w) for w in words if w != "&&"):
            die("the build stage's RUN may only chain simple commands with &&")
        commands, cur = [], []
        for w in words + ["&&"]:
            if w == "&&":
                commands.append(cur)
                cur = []
            else:
                cur.append(w)
        copied = []
        for cmd in commands:
            env = []
            while cmd and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", cmd[0]):
                env.append(cmd.pop(0))
            if cmd[:2] == ["cargo", "build"]:
                if cargo_args is not None:
                    die("more than one cargo build")
                if "--release" not in cmd:
                    die("cargo build without --release is not understood")
                cargo_env, cargo_args = env, cmd
            elif env:
                die(f"environment for a command other than cargo build: {' '.join(cmd)}")
            elif cmd[:2] == ["mkdir", "-p"] and len(cmd) == 3:
                out_dir = cmd[2].rstrip("/")
            elif cmd and cmd[0] == "cp" and len(cmd) >= 3:
                dest = cmd[-1].rstrip("/")
                if dest != out_dir:
                    die(f"cp into {cmd[-1]}, not the directory made with mkdir -p")
                for src in cmd[1:-1]:
                    if not src.startswith("target/release/") or "/" in src[len("target/release/"):]:
                        die(f"cp of {src}: only target/release/NAME is understood")
                    copied.append(src[len("target/release/"):])
            else:
                die(f"build-stage command not understood: {' '.join(cmd)}")
        bins = [cargo_args[i + 1] for i, w in enumerate(cargo_args) if w == "--bin"]
        if sorted(bins) != sorted(copied) or not copied:
            die(f"cargo builds --bin {bins} but cp copies {copied}")
        binaries = copied
    else:
        die(f"{kw} in the build stage is not understood by tests/scripts/image.sh")
if cargo_args is None or out_dir is None:
    where = build["line"]
    die("the build stage has no 'cargo build ... && mkdir -p DIR && cp ... DIR/'")

# --- run stage ------------------------------------------------------------------------------------
where = run["line"]
m = re.fullmatch(r"debian:(\w+)(-slim)?", run["image"])
if not m:
    die(f"the run stage's base is not debian:SUITE[-slim]: {run['image']}")
base_suite, base_slim = m.group(1), bool(m.group(2))
if base_suite != build_suite:
    die(f"build stage on {build_suite}, run stage on {base_suite}: the binaries' glibc would differ")

run_cmds, copy_dest = [], None
labels, user, ports, env, workdir_run = [], None, [], [], None
entrypoint, cmd, cmd_set = None, None, False
seen_runtime = None  # USER/ENV/WORKDIR change how a later RUN runs: not supported here
for n, kw, rest in run["body"]:
    where = n
    if kw == "RUN":
        if rest.startswith("[") or rest.startswith("--"):
            die("only the shell form of RUN, without flags, is understood in the run stage")
        if seen_runtime:
            die(f"RUN after {seen_runtime}: the script runs RUN as root in / without ENV")
        run_cmds.append(rest)
    elif kw == "COPY":
        words = shlex.split(rest)
        if len(words) != 3 or words[0] != f"--from={build['name']}":
            die(f"only 'COPY --from={build['name']} SRC DEST/' is understood: {rest}")
        if words[1].rstrip("/") != out_dir or not words[2].endswith("/") or copy_dest:
            die(f"COPY must copy {out_dir}/ into a directory (DEST/), once: {rest}")
        copy_dest = words[2]
    elif kw == "LABEL":
        words = shlex.split(rest)
        if not words or not all("=" in w for w in words):
            die("LABEL KEY VALUE (without =) is not understood")
        labels += words
    elif kw == "USER":
        if len(rest.split()) != 1:
            die(f"USER not understood: {rest}")
        user = rest
        seen_runtime = seen_runtime or "USER"
    elif kw == "EXPOSE":
        for p in rest.split():
            if not re.fullmatch(r"\d+(/(tcp|udp|sctp))?", p):
                die(f"EXPOSE {p} is not understood")
            ports.append(p if "/" in p else p + "/tcp")
    elif kw == "ENV":
        words = shlex.split(rest)
        if not words or not all("=" in w for w in words):
            die("ENV KEY VALUE (without =) is not understood")
        env += words
        seen_runtime = seen_runtime or "ENV"
    elif kw == "WORKDIR":
        if not rest.startswith("/"):
            die("a relative WORKDIR is not understood")
        workdir_run = rest
        seen_runtime = seen_runtime or "WORKDIR"
    elif kw in ("CMD", "ENTRYPOINT"):
        if rest.startswith("["):
            try:
                value = json.loads(rest)
            except ValueError as e:
                die(f"{kw} is not a JSON array: {e}")
            if not all(isinstance(v, str) for v in value):
                die(f"{kw} holds something other than strings")
        else:
            value = ["/bin/sh", "-c", rest]
        if kw == "CMD":
            cmd, cmd_set = value, True
        else:
            entrypoint = value
            if not cmd_set:
                cmd = []  # an ENTRYPOINT resets the base image's CMD
    else:
        die(f"{kw} in the run stage is not understood by tests/scripts/image.sh")
if copy_dest is None:
    where = run["line"]
    die("the run stage copies no binaries")

config = []
if user:
    config.append(f"--config.user={user}")
config += [f"--config.label={l}" for l in labels]
config += [f"--config.exposedports={p}" for p in ports]
config += [f"--config.env={e}" for e in env]
if workdir_run:
    config.append(f"--config.workingdir={workdir_run}")
if entrypoint is not None:
    config.append("--clear=config.entrypoint")
    config += [f"--config.entrypoint={a}" for a in entrypoint]
if cmd is not None:
    config.append("--clear=config.cmd")
    config += [f"--config.cmd={a}" for a in cmd]


def arr(name, values):
    print(f"{name}=(" + " ".join(shlex.quote(v) for v in values) + ")")


def var(name, value):
    print(f"{name}={shlex.quote(value)}")


var("rust_version", rust_version)
var("build_image", build["image"])
arr("cargo_env", build_env + cargo_env)
arr("cargo_args", cargo_args)
arr("binaries", binaries)
var("base_image", run["image"])
var("base_suite", base_suite)
var("base_slim", "1" if base_slim else "")
arr("run_cmds", run_cmds)
var("copy_dest", copy_dest)
arr("config_args", config)
PY
}

ensure_tools() {
  local missing=() t
  for t in mmdebstrap umoci skopeo runc; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  if ((${#missing[@]})); then
    [ "$(id -u)" = 0 ] || die "missing ${missing[*]}; run as root to apt-install them"
    log "installing ${missing[*]} (apt)"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

# The image's name and tags: the chart's image.repository and image.tag (empty: the chart's
# appVersion), plus `latest`, which the operator's --default-image names by default.
image_name() {
  local values=$repo/charts/baton/values.yaml chart=$repo/charts/baton/Chart.yaml
  repository=$(awk '/^image:/ {i=1; next} /^[^ ]/ {i=0} i && $1 == "repository:" {print $2; exit}' \
    "$values")
  tag=$(awk '/^image:/ {i=1; next} /^[^ ]/ {i=0} i && $1 == "tag:" {print $2; exit}' "$values" |
    tr -d '"')
  [ -n "$tag" ] || tag=$(awk '$1 == "appVersion:" {print $2}' "$chart" | tr -d '"')
  if [ -z "$repository" ] || [ -z "$tag" ]; then
    die "no image.repository or tag in charts/baton"
  fi
  local operator_default
  operator_default=$(grep -o 'default_value = "[^"]*:latest"' "$repo/operator/src/cli.rs" |
    head -n1 | sed 's/.*"\(.*\)"/\1/')
  [ "$operator_default" = "$repository:latest" ] ||
    die "the operator's --default-image ($operator_default) is not $repository:latest"
}

target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "$CARGO_TARGET_DIR"
  else
    echo "$repo/target"
  fi
}

# 1. The build stage's cargo build, its words and environment as the Dockerfile has them.
build_binaries() {
  local have
  have=$(rustc --version | awk '{print $2}')
  case "$have" in
    "$rust_version" | "$rust_version".*) ;;
    *) die "the Dockerfile builds with $build_image, this toolchain is rustc $have" ;;
  esac
  log "build stage: ${cargo_env[*]} ${cargo_args[*]} (nice -n 19)"
  local start=$SECONDS
  (cd "$repo" && env "${cargo_env[@]}" nice -n 19 "${cargo_args[@]}") >&2 ||
    die "cargo build failed"
  log "build stage: done in $((SECONDS - start)) s"
  local b
  for b in "${binaries[@]}"; do
    [ -x "$(target_dir)/release/$b" ] || die "cargo built no $(target_dir)/release/$b"
  done
}

# What slim leaves out of every package (dpkg path filters), and the apt settings of Debian's
# container images that keep downloaded packages and caches out of the layers.
slim_dpkgopts=(
  'path-exclude=/usr/share/doc/*'
  'path-include=/usr/share/doc/*/copyright'
  'path-exclude=/usr/share/man/*'
  'path-exclude=/usr/share/info/*'
  'path-exclude=/usr/share/groff/*'
  'path-exclude=/usr/share/lintian/*'
  'path-exclude=/usr/share/linda/*'
  'path-exclude=/usr/share/locale/*'
)
# shellcheck disable=SC2016 # $1 is mmdebstrap's, expanded by the hook's shell.
base_hooks=(
  'printf "%s\n" "DPkg::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true\"; };" "Dir::Cache::pkgcache \"\";" "Dir::Cache::srcpkgcache \"\";" > "$1/etc/apt/apt.conf.d/docker-clean"'
  'printf "%s\n" "Acquire::Languages \"none\";" > "$1/etc/apt/apt.conf.d/docker-no-languages"'
  'rm -f "$1/etc/resolv.conf" "$1/etc/hostname" "$1"/var/cache/apt/*.bin'
)

# 2. The base: debian:SUITE(-slim) from Debian's packages, as the tarball $base_tar.
base_tarball() {
  # The merged-usr hook installs usr-is-merged, not usrmerge (which would bring all of perl in).
  local opts=(--mode=root --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
  local o h
  if [ -n "$base_slim" ]; then
    for o in "${slim_dpkgopts[@]}"; do opts+=("--dpkgopt=$o"); done
  fi
  for h in "${base_hooks[@]}"; do opts+=("--customize-hook=$h"); done
  local key
  key=$(printf '%s\n' "$(mmdebstrap --version)" "$(dpkg --print-architecture)" "$base_suite" \
    "${opts[@]}" | sha256sum | cut -c1-16)
  base_key=$key
  local tar=$cache/base-$key.tar
  base_tar=$tar
  if [ ! -f "$tar" ]; then
    mkdir -p "$cache"
    log "base: $base_image from Debian's packages (mmdebstrap ${opts[*]:0:2} $base_suite)"
    local start=$SECONDS
    rm -f "$tar.tmp" "$tar.full.tar"
    nice -n 19 mmdebstrap --quiet --format=tar "${opts[@]}" "$base_suite" "$tar.full.tar" >&2 ||
      die "mmdebstrap failed"
    # A container's /dev is the runtime's: the image holds the empty directory only.
    mmtarfilter '--path-exclude=/dev/*' <"$tar.full.tar" >"$tar.tmp"
    rm -f "$tar.full.tar"
    mv "$tar.tmp" "$tar"
    log "base: done in $((SECONDS - start)) s ($(du -m "$tar" | cut -f1) MB uncompressed)"
  fi
}

# Runs one RUN of the run stage in ROOTFS as a builder does: /bin/sh -c, as root, in its own
# mount namespace with /dev, /proc and the host's resolv.conf lent (gone when it exits).
run_in_rootfs() {
  local rootfs=$1 command=$2 made_resolv=""
  if [ ! -e "$rootfs/etc/resolv.conf" ] && [ ! -L "$rootfs/etc/resolv.conf" ]; then
    : >"$rootfs/etc/resolv.conf"
    made_resolv=1
  fi
  local rc=0
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount --propagation private -- /bin/sh -ec '
    r=$1
    mount --rbind /dev "$r/dev"
    mount -t proc proc "$r/proc"
    mount --bind -o ro "$(readlink -f /etc/resolv.conf)" "$r/etc/resolv.conf"
    exec chroot "$r" /usr/bin/env -i HOME=/root HOSTNAME=build \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c "$2"
  ' run-stage "$rootfs" "$command" >&2 || rc=$?
  [ -z "$made_resolv" ] || rm -f "$rootfs/etc/resolv.conf"
  return "$rc"
}

# 3. The base layer and one layer per RUN, as the OCI layout $stage_layout tagged `stage`.
run_layers() {
  local key
  key=$(printf '%s\n' "$base_key" "$self_hash" "${run_cmds[@]}" | sha256sum | cut -c1-16)
  run_key=$key
  local dir=$cache/run-$key
  stage_layout=$dir/oci
  if [ ! -f "$dir/done" ]; then
    local tmp=$dir.tmp start=$SECONDS c
    rm -rf "$tmp"
    mkdir -p "$tmp"
    umoci init --layout "$tmp/oci"
    umoci new --image "$tmp/oci:stage"
    # The base image's own config (debian's images set PATH and CMD ["bash"]).
    umoci config --image "$tmp/oci:stage" --no-history --os linux \
      --architecture "$(dpkg --print-architecture)" \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --config.cmd bash
    umoci raw add-layer --image "$tmp/oci:stage" \
      --history.created_by "mmdebstrap --variant=minbase $base_suite (in place of $base_image)" \
      "$base_tar"
    for c in "${run_cmds[@]}"; do
      log "run stage: RUN $c"
      rm -rf "$tmp/bundle"
      umoci unpack --image "$tmp/oci:stage" "$tmp/bundle" >&2
      run_in_rootfs "$tmp/bundle/rootfs" "$c" || die "RUN failed: $c"
      umoci repack --image "$tmp/oci:stage" --history.created_by "/bin/sh -c $c" \
        "$tmp/bundle" >&2
    done
    rm -rf "$tmp/bundle"
    umoci gc --layout "$tmp/oci"
    touch "$tmp/done"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    log "run stage: base and RUN layers done in $((SECONDS - start)) s"
  fi
}

# The image's size: compressed layers as a registry stores and a node pulls them.
print_size() {
  local out=$1
  python3 - "$out/oci" "$tag" <<'PY'
import json, os, sys
layout, tag = sys.argv[1], sys.argv[2]
def blob(d):
    algo, hexd = d.split(":")
    return os.path.join(layout, "blobs", algo, hexd)
index = json.load(open(os.path.join(layout, "index.json")))
desc = next(m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
manifest = json.load(open(blob(desc["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
history = [h for h in config.get("history", []) if not h.get("empty_layer")]
total = sum(l["size"] for l in manifest["layers"])
for i, l in enumerate(manifest["layers"]):
    what = history[i].get("created_by", "") if i < len(history) else ""
    print(f"  layer {i + 1}: {l['size'] / 1e6:7.1f} MB  {what[:90]}")
print(f"compressed size: {total / 1e6:.1f} MB ({total} bytes in {len(manifest['layers'])} layers)")
PY
  echo "uncompressed rootfs: $(du -sm --apparent-size "$out/bundle/rootfs" | cut -f1) MB"
}

# 4. The binaries' layer and the config; the layout, the archive and the unpacked bundle.
cmd_build() {
  local out=$1
  [ "$(id -u)" = 0 ] || die "build needs root (mmdebstrap's root mode, chroot, root-owned files)"
  local plan
  plan=$(parse_dockerfile) || exit 1
  eval "$plan"
  image_name
  ensure_tools
  mkdir -p "$out"
  out=$(cd "$out" && pwd -P)
  local started=$SECONDS

  build_binaries
  base_tarball
  run_layers

  local td b sums key
  td=$(target_dir)
  sums=$(cd "$td/release" && sha256sum "${binaries[@]}")
  key=$(printf '%s\n' "$run_key" "$self_hash" "$sums" "$copy_dest" "${config_args[@]}" \
    "$repository" "$tag" | sha256sum | cut -c1-16)
  if [ "$(cat "$out/.image-key" 2>/dev/null)" = "$key" ] && [ -d "$out/oci" ] &&
    [ -f "$out/baton-image.tar" ] && [ -d "$out/bundle/rootfs" ]; then
    log "up to date in $out ($repository:$tag)"
  else
    local start=$SECONDS
    rm -rf "$out/oci.tmp" "$out/bundle.tmp" "$out/copy.tmp" "$out/baton-image.tar.tmp"
    rm -f "$out/.image-key"
    cp -a "$stage_layout" "$out/oci.tmp"
    # COPY --from=build OUT/ DEST/: the binaries, owned by root, modes and times kept.
    mkdir -p "$out/copy.tmp"
    chmod 0755 "$out/copy.tmp"
    for b in "${binaries[@]}"; do
      cp --preserve=mode,timestamps "$td/release/$b" "$out/copy.tmp/$b"
    done
    chown -R 0:0 "$out/copy.tmp"
    umoci insert --image "$out/oci.tmp:stage" \
      --history.created_by "COPY --from=build ${binaries[*]} $copy_dest" \
      "$out/copy.tmp" "${copy_dest%/}"
    rm -rf "$out/copy.tmp"
    umoci config --image "$out/oci.tmp:stage" --tag "$tag" --no-history "${config_args[@]}"
    umoci tag --image "$out/oci.tmp:$tag" latest
    umoci rm --image "$out/oci.tmp:stage"
    umoci gc --layout "$out/oci.tmp"
    umoci unpack --image "$out/oci.tmp:$tag" "$out/bundle.tmp" >/dev/null
    skopeo copy --quiet "oci:$out/oci.tmp:$tag" \
      "docker-archive:$out/baton-image.tar.tmp:$repository:$tag" \
      --additional-tag "$repository:latest" >&2
    rm -rf "$out/oci" "$out/bundle"
    mv "$out/oci.tmp" "$out/oci"
    mv "$out/bundle.tmp" "$out/bundle"
    mv "$out/baton-image.tar.tmp" "$out/baton-image.tar"
    echo "$key" >"$out/.image-key"
    log "assembled in $((SECONDS - start)) s"
  fi
  echo "$repository:$tag (and :latest), built in $((SECONDS - started)) s"
  echo "OCI layout: $out/oci (tags $tag, latest)"
  echo "archive: $out/baton-image.tar (ctr -n k8s.io images import / docker load)"
  echo "bundle: $out/bundle (runc run --bundle)"
  print_size "$out"
}

case "${1:-}" in
  build)
    [ $# -eq 2 ] || usage
    cmd_build "$2"
    ;;
  check)
    [ $# -eq 2 ] || usage
    cmd_build "$2"
    out=$(cd "$2" && pwd -P)
    log "check: cargo test -p baton-tests --test image -- --ignored (nice -n 19)"
    cd "$repo"
    BATON_IMAGE_DIR=$out nice -n 19 cargo test -p baton-tests --test image -- --ignored
    ;;
  plan)
    [ $# -eq 1 ] || usage
    plan=$(parse_dockerfile) || exit 1
    echo "$plan"
    eval "$plan"
    image_name
    echo "repository=$repository tag=$tag (and latest)"
    ;;
  packages)
    [ $# -eq 1 ] || usage
    ensure_tools
    ;;
  size)
    [ $# -eq 2 ] || usage
    eval "$(parse_dockerfile)"
    image_name
    [ -d "$2/oci" ] || die "no image in $2 (run build first)"
    print_size "$2"
    ;;
  -h | --help | help) usage 0 ;;
  *) usage ;;
esac
