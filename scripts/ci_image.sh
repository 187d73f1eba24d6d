#!/usr/bin/env bash
# Build the CPU image of ./Dockerfile and run it as a user would, without a
# Docker daemon and without a container registry (buildah and podman, from
# Debian's packages). CI calls this after the tests.
#
#   scripts/ci_image.sh           tools, stand-in base, image, then the checks
#
# The base: the Dockerfile's CPU target starts FROM python:3.11.7-slim-bookworm,
# pinned by digest. Where no registry is reachable, a stand-in is built under
# the same name and tag: Debian bookworm from Debian's packages (mmdebstrap)
# plus this machine's CPython 3.11.7 (the lock's Python) under /usr/local, as
# the official image lays it out. It is kept in podman's storage and as a
# tarball under $FUSEDBENCH_IMAGE_CACHE, both keyed by a hash of its inputs,
# so a second run reuses it.
#
# The stand-in also trusts this machine's local certificate authorities (its
# network needs them for TLS) and points pip, npm and Python's ssl at that
# trust store (ENV), which the image inherits.
#
# The one difference from a user's build: the stand-in's digest is passed as
# the PYTHON_IMAGE_DIGEST build argument (a real one can only come from the
# registry), and torch's CPU wheel, which the public PyTorch index serves,
# comes from a local folder of wheels mounted into the build (TORCH_FIND_LINKS).
# pip checks that wheel against the sha256 in requirements/cpu.txt either way.
#
#   FUSEDBENCH_IMAGE_CACHE    stand-in tarballs (default /var/cache/fusedbench)
#   FUSEDBENCH_BASE_PYTHON    the CPython 3.11.7 prefix to copy (default /root/.pyenv/versions/3.11.7)
#   FUSEDBENCH_TORCH_WHEELS   folder holding torch's CPU wheel (default /opt/wheels)
#   FUSEDBENCH_IMAGE          image tag (default fusedbench:cpu)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${FUSEDBENCH_IMAGE_CACHE:-/var/cache/fusedbench}
python_prefix=${FUSEDBENCH_BASE_PYTHON:-/root/.pyenv/versions/3.11.7}
image=${FUSEDBENCH_IMAGE:-fusedbench:cpu}
torch_wheels=${FUSEDBENCH_TORCH_WHEELS:-/opt/wheels}
PODMAN_RUNTIME=(--runtime runc)
base_name=python  # a short name: podman stores it as localhost/python
base_tag=3.11.7-slim-bookworm
say() { echo "ci_image: $*"; }

# --- the tools ---------------------------------------------------------------------
# podman and buildah read this file instead of /etc/containers/containers.conf:
# the machine's default open-files limit cannot be raised inside a container
# here ("setrlimit RLIMIT_NOFILE: Operation not permitted"), so none is set.
# runc, not crun: crun refuses cgroups in hybrid mode.
ensure_tools() {
  local missing=()
  for tool in buildah podman runc mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  say "installing ${missing[*]} (apt)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah podman runc mmdebstrap; } \
      >"$cache/apt.log" 2>&1; then
    tail -n 5 "$cache/apt.log" >&2
    say "SKIPPED: buildah, podman, runc and mmdebstrap cannot be installed here (apt output above);" \
        "the image was not built or run" >&2
    exit 0
  fi
}

# --- the stand-in base ---------------------------------------------------------------
# This machine's own certificate authorities. Where the network terminates TLS
# with a local authority, every client in a container must trust it as the
# host does (apt here uses plain http; pip and npm use https).
LOCAL_CAS=/usr/local/share/ca-certificates
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

# Its inputs: this recipe, the Python tree that is copied (names, sizes, times)
# and the local certificate authorities.
base_key() {
  {
    sed -n '/^# --- the stand-in base/,/^# --- end of the stand-in base/p' "${BASH_SOURCE[0]}"
    cat "$LOCAL_CAS"/*.crt 2>/dev/null || true
    (cd "$python_prefix" && find bin/python3.11 include lib/libpython3.11.so.1.0 lib/python3.11 \
      -path lib/python3.11/site-packages -prune -o -printf '%p %s %T@\n' | LC_ALL=C sort)
  } | sha256sum | cut -c1-16
}

# Runtime libraries the official slim image carries for its Python's modules.
BASE_PACKAGES=ca-certificates,netbase,tzdata,libbz2-1.0,libexpat1,libffi8,liblzma5,libncursesw6,libreadline8,\
libsqlite3-0,libssl3,libuuid1,zlib1g

# The official image's layout: Python under /usr/local, its libpython found
# through ldconfig, no third-party packages; pip from ensurepip.
build_base_tarball() {
  local tarball=$1 work
  work=$(mktemp -d)
  mkdir -p "$work/python/bin" "$work/python/lib" "$work/python/include"
  cp -a "$python_prefix/bin/python3.11" "$work/python/bin/"
  ln -s python3.11 "$work/python/bin/python3"
  ln -s python3 "$work/python/bin/python"
  cp -a "$python_prefix"/lib/libpython3* "$work/python/lib/"
  cp -a "$python_prefix/include/python3.11" "$work/python/include/"
  (cd "$python_prefix/lib" && tar --exclude='python3.11/site-packages/*' --exclude='__pycache__' -cf - python3.11) \
    | tar -C "$work/python/lib" -xf -
  # The suites the official image's apt sources name, so security updates resolve alike.
  # The hooks' "$1" is the new root, filled in by mmdebstrap.
  # shellcheck disable=SC2016
  mmdebstrap --quiet --variant=minbase --format=tar --include="$BASE_PACKAGES" \
    --customize-hook="cp -a '$work/python/.' \"\$1/usr/local/\"" \
    --customize-hook="if ls $LOCAL_CAS/*.crt >/dev/null 2>&1; then cp $LOCAL_CAS/*.crt \"\$1$LOCAL_CAS/\"; fi" \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    --customize-hook='chroot "$1" ldconfig' \
    --customize-hook='chroot "$1" /usr/local/bin/python3.11 -m ensurepip --default-pip >/dev/null' \
    bookworm "$tarball.part" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  mv "$tarball.part" "$tarball"
  rm -rf "$work"
}

ensure_base() {
  local key tarball found
  key=$(base_key)
  found=$(podman image inspect --format '{{ index .Labels "io.fusedbench.stand-in" }}' "$base_name:$base_tag" \
    2>/dev/null || true)
  if [ "$found" = "$key" ]; then
    say "stand-in base $base_name:$base_tag ($key) is in podman's storage"
    return 0
  fi
  tarball=$cache/stand-in-python-$base_tag-$key.tar
  if [ ! -f "$tarball" ]; then
    say "building the stand-in base ($key): Debian bookworm minbase + CPython from $python_prefix"
    rm -f "$cache"/stand-in-python-*.tar  # other keys: outdated
    build_base_tarball "$tarball"
  fi
  podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'ENV PYTHON_VERSION=3.11.7' \
    --change "ENV PIP_CERT=$CA_BUNDLE" --change "ENV NODE_EXTRA_CA_CERTS=$CA_BUNDLE" \
    --change "ENV SSL_CERT_FILE=$CA_BUNDLE" --change "ENV REQUESTS_CA_BUNDLE=$CA_BUNDLE" \
    --change "LABEL io.fusedbench.stand-in=$key" --change 'CMD ["python3"]' \
    "$tarball" "$base_name:$base_tag" >/dev/null
  say "stand-in base $base_name:$base_tag ($key) imported from $tarball"
}
# --- end of the stand-in base ----------------------------------------------------------

# --- the image, and the checks a user would make ---------------------------------------
# The tests run in the image: the op library loads, and a single norm exports
# by every route and matches in ONNX Runtime (the custom route through the ORT
# library built in the image).
SMOKE_TESTS="library_loading or single_norm_exports_and_matches"

invoke_task() { (cd "$repo" && bash scripts/with_env.sh "$@"); }

build_image() {
  local digest
  digest=$(podman image inspect --format '{{.Digest}}' "$base_name:$base_tag")
  say "building $image (cpu variant) FROM $base_name:$base_tag@$digest (the stand-in)"
  invoke_task docker.build --variant cpu --tag "$image" --base-digest "$digest" --local-base \
    --torch-find-links "$torch_wheels"
}

check_image() {
  local reports owner want record
  reports=$(mktemp -d "${TMPDIR:-/tmp}/fusedbench-image-reports.XXXXXX")
  # bench --quick writes its report to the mounted folder, as the invoking user.
  invoke_task docker.run --tag "$image" --reports "$reports" -- bench --quick
  shopt -s nullglob
  local found=("$reports"/*.csv)
  if [ "${#found[@]}" -ne 1 ]; then
    echo "ci_image: expected one report in $reports after bench --quick, found ${#found[@]}" >&2
    exit 1
  fi
  # The report belongs to the invoking user: `invoke docker.build` bakes their
  # uid into the image, and for root (the image never runs as root)
  # `invoke docker.run` lends the folder to the image's user for the run and
  # gives what it wrote back afterwards.
  want=$(id -u)
  owner=$(stat -c %u "${found[0]}")
  if [ "$owner" != "$want" ]; then
    echo "ci_image: the report ${found[0]} belongs to uid $owner, not to uid $want" >&2
    exit 1
  fi
  say "report on the host: ${found[0]} ($(wc -l <"${found[0]}") lines, owned by uid $owner)"
  # invoke hands docker.run the words after `--` joined by spaces: quote the expression once more.
  invoke_task docker.run --tag "$image" --reports "$reports" -- test -k "'$SMOKE_TESTS'"
  # The environment and the toolchain record baked into the image against the lock.
  invoke_task docker.run --tag "$image" --reports "$reports" -- env.check
  record=$(podman "${PODMAN_RUNTIME[@]}" run --rm --entrypoint /opt/fusedbench-env/bin/python "$image" \
    -m env.image build/toolchain.json cpu)
  say "$record"
  rm -rf "$reports"
}

main() {
  mkdir -p "$cache"
  ensure_tools
  export CONTAINERS_CONF=$cache/containers.conf
  printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
  ensure_base
  build_image
  check_image
}

main "$@"
