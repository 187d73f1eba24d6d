#!/usr/bin/env bash
# Create (or re-sync) the fusedbench environment from environment.lock.yml.
#
#   micromamba or conda on PATH: a conda env at $FUSEDBENCH_ENV holding exactly
#                                the lock's conda builds (Python + native libs)
#   otherwise:                   a venv at $FUSEDBENCH_ENV made by python<major.minor>
# $FUSEDBENCH_ENV defaults to <repo>/.venv. Packages are installed with
# `pip install --no-deps` from the lock's exact pins, then `pip check` proves
# the set is self-consistent. A stamp holding the lock's sha256 makes re-runs
# free until the lock changes. The Dockerfile and .ci/run call this same script.
#
# FUSEDBENCH_TORCH_VARIANT=cpu (default) installs the pip list only.
# FUSEDBENCH_TORCH_VARIANT=cuda (the image) first installs the lock's cuda-pip
# list with --require-hashes (torch's CUDA wheel and the nvidia-*/triton
# wheels it needs), then the same pip list.
#
# Nothing is solved by pip (--no-deps). The conda part is passed to the
# solver as name=version=build specs with pip not added to Python, so it has
# one candidate per package; the result is then compared with the lock and
# any package the solver added fails the run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=${FUSEDBENCH_LOCK:-$repo/environment.lock.yml}
prefix=${FUSEDBENCH_ENV:-$repo/.venv}
variant=${FUSEDBENCH_TORCH_VARIANT:-cpu}
stamp=$prefix/.fusedbench-lock.sha256
case "$variant" in
  cpu) want=$(sha256sum "$lock" | cut -d' ' -f1) ;;
  cuda) want="$(sha256sum "$lock" | cut -d' ' -f1) cuda" ;;
  *) echo "create_env: FUSEDBENCH_TORCH_VARIANT must be cpu or cuda, got '$variant'" >&2; exit 1 ;;
esac

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$prefix/bin/python" ]; then
  exit 0
fi

pins_tool=$repo/scripts/lock_pins.py
bootstrap_python=$(command -v python3 || true)
[ -n "$bootstrap_python" ] || { echo "create_env: python3 is needed to read the lock" >&2; exit 1; }
python_version=$("$bootstrap_python" "$pins_tool" python "$lock")
python_minor=${python_version%.*}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$prefix/bin/python" ]; then
  if command -v micromamba >/dev/null 2>&1 || command -v conda >/dev/null 2>&1; then
    solver=$(command -v micromamba || command -v conda)
    "$bootstrap_python" "$pins_tool" conda-specs "$lock" >"$tmp/conda-specs.txt"
    echo "create_env: conda env at $prefix ($(wc -l <"$tmp/conda-specs.txt") exact builds) with $solver"
    # Without this, conda and micromamba make pip (and so setuptools and
    # wheel) a dependency of python: packages outside the lock.
    export MAMBA_ADD_PIP_AS_PYTHON_DEPENDENCY=false CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false
    mapfile -t conda_specs <"$tmp/conda-specs.txt"
    "$solver" create --yes --prefix "$prefix" --override-channels -c conda-forge --strict-channel-priority \
      "${conda_specs[@]}"
    "$solver" list --prefix "$prefix" --json >"$tmp/conda-list.json"
    "$bootstrap_python" "$pins_tool" check-conda "$lock" <"$tmp/conda-list.json"
    # pip from Python's own bundled wheel: the version the lock pins, as in a venv.
    "$prefix/bin/python" -m ensurepip --default-pip >"$tmp/ensurepip.log" 2>&1 \
      || { cat "$tmp/ensurepip.log" >&2; exit 1; }
  else
    interpreter=$(command -v "python$python_minor" || true)
    [ -n "$interpreter" ] || { echo "create_env: python$python_minor not found; install Python $python_version" >&2; exit 1; }
    found=$("$interpreter" -c 'import platform; print(platform.python_version())')
    if [ "$found" != "$python_version" ]; then
      echo "create_env: the lock pins Python $python_version but $interpreter is $found." >&2
      echo "create_env: install Python $python_version (or use conda/micromamba), or regenerate the lock with 'invoke lock'." >&2
      exit 1
    fi
    echo "create_env: venv at $prefix with $interpreter ($found)"
    "$interpreter" -m venv "$prefix"
  fi
fi

pip_install() {  # pip_install REQUIREMENTS [extra pip args]: quiet unless it fails
  local requirements=$1
  shift
  if ! "$prefix/bin/python" -m pip install --no-deps "$@" -r "$requirements" >"$tmp/pip.log" 2>&1; then
    grep -v "^WARNING: Location .* is ignored" "$tmp/pip.log" >&2
    echo "create_env: pip install failed (output above)" >&2
    exit 1
  fi
}

if [ "$variant" = cuda ]; then
  "$bootstrap_python" "$pins_tool" cuda-pins "$lock" >"$tmp/cuda-requirements.txt"
  echo "create_env: installing $(wc -l <"$tmp/cuda-requirements.txt") hashed CUDA pins (--no-deps --require-hashes)"
  pip_install "$tmp/cuda-requirements.txt" --require-hashes
fi
"$bootstrap_python" "$pins_tool" pins "$lock" >"$tmp/requirements.txt"
echo "create_env: installing $(wc -l <"$tmp/requirements.txt") pinned packages (--no-deps)"
pip_install "$tmp/requirements.txt"
"$prefix/bin/python" -m pip check
echo "$want" >"$stamp"
if [ "$variant" = cuda ]; then
  echo "create_env: $prefix matches $(basename "$lock") (CUDA variant)"
else
  echo "create_env: $prefix matches $(basename "$lock")"
fi
