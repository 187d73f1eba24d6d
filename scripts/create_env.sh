#!/usr/bin/env bash
# Create (or re-sync) the fusedbench environment from environment.lock.yml
# and requirements/<variant>.txt.
#
#   micromamba or conda on PATH: a conda env at $FUSEDBENCH_ENV holding exactly
#                                the lock's conda builds (Python + native libs)
#   otherwise:                   a venv at $FUSEDBENCH_ENV made by the Python
#                                version the lock pins
# Then, on both paths, the variant's hashed requirements are installed with
# uv (or `pip install --require-hashes --no-deps`: FUSEDBENCH_INSTALLER=pip, or
# where pip's settings have no uv equivalent): nothing is resolved, every file's
# sha256 is checked. `pip check` proves the set is self-consistent and
# `invoke env.check`'s comparison proves nothing else is installed. A stamp
# holding the sha256 of the lock and of the requirements file makes re-runs
# free until either changes. The Dockerfile, .ci/run and CI call this script.
#
# The solver gets the lock's conda specs (its `  - name=version=build` lines),
# not the file itself: micromamba's handling of an environment file's pip
# section differs between versions (where it writes the requirements, whether
# it adds pip), so pip is run here, the same way on both paths.
#
#   FUSEDBENCH_ENV            prefix (default <repo>/.venv)
#   FUSEDBENCH_INSTALLER      uv (default) or pip
#   FUSEDBENCH_TORCH_VARIANT  cpu (default): requirements/cpu.txt, torch's CPU build
#                             cuda: requirements/cuda.txt, torch's CUDA 13.0 build (the image)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=$repo/environment.lock.yml
prefix=${FUSEDBENCH_ENV:-$repo/.venv}
export FUSEDBENCH_TORCH_VARIANT=${FUSEDBENCH_TORCH_VARIANT:-cpu}
variant=$FUSEDBENCH_TORCH_VARIANT
case "$variant" in
  cpu | cuda) ;;
  *) echo "create_env: FUSEDBENCH_TORCH_VARIANT must be cpu or cuda, got '$variant'" >&2; exit 1 ;;
esac
requirements=$repo/requirements/$variant.txt
stamp=$prefix/.fusedbench-lock.sha256
want="$(cat "$lock" "$requirements" | sha256sum | cut -d' ' -f1) $variant"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$prefix/bin/python" ]; then
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The lock's exact conda specs, one per line, and the Python version among them.
grep -E '^  - [A-Za-z0-9_][A-Za-z0-9._-]*=[^=[:space:]]+=[^=[:space:]]+$' "$lock" | sed 's/^  - //' >"$tmp/conda-specs.txt" || true
python_version=$(sed -n 's/^python=\([0-9.]*\)=.*$/\1/p' "$tmp/conda-specs.txt")
[ -n "$python_version" ] || { echo "create_env: no '  - python=VERSION=BUILD' line in $lock" >&2; exit 1; }

if [ ! -x "$prefix/bin/python" ]; then
  if command -v micromamba >/dev/null 2>&1 || command -v conda >/dev/null 2>&1; then
    solver=$(command -v micromamba || command -v conda)
    echo "create_env: conda env at $prefix ($(wc -l <"$tmp/conda-specs.txt") exact builds) with $solver"
    # Without this, the solver makes pip (and so setuptools and wheel) a
    # dependency of python: packages outside the pins.
    export MAMBA_ADD_PIP_AS_PYTHON_DEPENDENCY=false CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false
    "$solver" create --yes --prefix "$prefix" --override-channels -c conda-forge --strict-channel-priority \
      --file "$tmp/conda-specs.txt"
    # pip from Python's own bundled wheel (the version the pins hold, as in a venv).
    "$prefix/bin/python" -m ensurepip --default-pip >"$tmp/ensurepip.log" 2>&1 \
      || { cat "$tmp/ensurepip.log" >&2; exit 1; }
  else
    interpreter=$(command -v "python${python_version%.*}" || true)
    [ -n "$interpreter" ] || { echo "create_env: python${python_version%.*} not found; install Python $python_version" >&2; exit 1; }
    found=$("$interpreter" -c 'import platform; print(platform.python_version())')
    if [ "$found" != "$python_version" ]; then
      echo "create_env: the lock pins Python $python_version but $interpreter is $found." >&2
      echo "create_env: install Python $python_version (or use conda/micromamba)." >&2
      exit 1
    fi
    echo "create_env: venv at $prefix with $interpreter ($found)"
    "$interpreter" -m venv "$prefix"
  fi
fi

pins=$(grep -c '^[A-Za-z0-9]' "$requirements")
# uv installs the pins in parallel from its cache of unpacked wheels (1-4 s here, against pip's 21 s); it is itself a
# pin, installed first by pip from its hashed entry. env/lock/uv_install.py hands pip's index settings to it, and
# asks for pip (status 3) where a pip setting has no uv equivalent. Where uv cannot be installed or fails, pip
# installs the pins after all (a file whose hash differs fails there too). FUSEDBENCH_INSTALLER=pip installs with
# pip. Either way nothing is resolved and every file's sha256 is checked; neither byte-compiles (below).
installer=${FUSEDBENCH_INSTALLER:-uv}
case "$installer" in
  uv | pip) ;;
  *) echo "create_env: FUSEDBENCH_INSTALLER must be uv or pip, got '$installer'" >&2; exit 1 ;;
esac
# pip's install of a hashed requirements file ($1), its output to $2.
pip_install() {
  "$prefix/bin/python" -m pip install --require-hashes --no-deps --no-compile -r "$1" >"$2" 2>&1
}
install_with_pip() {
  if ! pip_install "$1" "$tmp/pip.log"; then
    grep -v "^WARNING: Location .* is ignored" "$tmp/pip.log" >&2 || true
    echo "create_env: pip install failed (output above)" >&2
    exit 1
  fi
}
echo "create_env: installing requirements/$variant.txt ($pins pins, --no-deps, every file's hash checked) with $installer"
if [ "$installer" = uv ]; then
  # uv's entry: its pin line and the hash lines that continue it.
  awk '/^uv==/ {keep = 1} keep {print} keep && !/\\$/ {exit}' "$requirements" >"$tmp/uv.txt"
  [ -s "$tmp/uv.txt" ] || { echo "create_env: $requirements pins no uv" >&2; exit 1; }
  status=0
  if pip_install "$tmp/uv.txt" "$tmp/uv.log"; then
    (cd "$repo" && "$prefix/bin/python" -m env.lock.uv_install "$prefix/bin/uv" "$prefix/bin/python" "$requirements") \
      >>"$tmp/uv.log" 2>&1 || status=$?
  else
    status=1
  fi
  if [ "$status" = 3 ]; then
    cat "$tmp/uv.log"
    installer=pip
  elif [ "$status" != 0 ]; then
    grep -v "^WARNING: Location .* is ignored" "$tmp/uv.log" >&2 || true  # (grep fails where nothing is left)
    echo "create_env: uv could not install the pins (output above): installing them with pip" >&2
    installer=pip
  fi
fi
if [ "$installer" = pip ]; then
  install_with_pip "$requirements"
fi
# Like pip, leave uncompiled the few files Python cannot compile (torch ships tests in a newer Python's syntax);
# they are listed. Unlike pip, leave as source what nothing here imports: the packages' own test suites (folders
# named test or tests: 3,150 of the 13,000 files, a fifth of the bytes), plotly past its top-level modules (the
# history site copies its JavaScript file and imports the package alone) and narwhals (plotly's data-frame layer):
# 1,650 files, a ninth of the bytes left, 2 s of the 15 s compile. A module without its .pyc still imports (compiled in
# memory).
site=$("$prefix/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ! "$prefix/bin/python" -m compileall -q -j 0 -x '/tests?/|/plotly/[^/]+/|/narwhals/' "$site" >"$tmp/compile.log" 2>&1; then
  failed=$(sed -n "s/^\*\*\* Error compiling '\(.*\)'.*/\1/p" "$tmp/compile.log")
  [ -n "$failed" ] || { cat "$tmp/compile.log" >&2; echo "create_env: compileall failed (output above)" >&2; exit 1; }
  echo "create_env: left as source, as pip does, what Python $python_version cannot compile:"
  while IFS= read -r path; do echo "  $path"; done <<<"$failed"
fi
"$prefix/bin/python" -m pip check
(cd "$repo" && "$prefix/bin/python" -m env.lock.drift)
echo "$want" >"$stamp"
