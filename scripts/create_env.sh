#!/usr/bin/env bash
# Create (or re-sync) the fusedbench environment from environment.lock.yml.
#
#   micromamba or conda on PATH: a conda env at $FUSEDBENCH_ENV (python from the lock)
#   otherwise:                   a venv at $FUSEDBENCH_ENV made by python<major.minor>
# $FUSEDBENCH_ENV defaults to <repo>/.venv. Packages are installed with
# `pip install --no-deps` from the lock's exact pins, then `pip check` proves
# the set is self-consistent. A stamp holding the lock's sha256 makes re-runs
# free until the lock changes. The Dockerfile and .ci/run call this same script.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=${FUSEDBENCH_LOCK:-$repo/environment.lock.yml}
prefix=${FUSEDBENCH_ENV:-$repo/.venv}
stamp=$prefix/.fusedbench-lock.sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$prefix/bin/python" ]; then
  exit 0
fi

pins_tool=$repo/scripts/lock_pins.py
bootstrap_python=$(command -v python3 || true)
[ -n "$bootstrap_python" ] || { echo "create_env: python3 is needed to read the lock" >&2; exit 1; }
python_version=$("$bootstrap_python" "$pins_tool" python "$lock")
python_minor=${python_version%.*}

if [ ! -x "$prefix/bin/python" ]; then
  if command -v micromamba >/dev/null 2>&1 || command -v conda >/dev/null 2>&1; then
    solver=$(command -v micromamba || command -v conda)
    echo "create_env: conda env at $prefix (python=$python_version) with $solver"
    "$solver" create --yes --prefix "$prefix" --override-channels -c conda-forge "python=$python_version" pip
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

requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
"$bootstrap_python" "$pins_tool" pins "$lock" >"$requirements"
echo "create_env: installing $(wc -l <"$requirements") pinned packages (--no-deps)"
log=$(mktemp)
trap 'rm -f "$requirements" "$log"' EXIT
if ! "$prefix/bin/python" -m pip install --no-deps -r "$requirements" >"$log" 2>&1; then
  grep -v "^WARNING: Location .* is ignored" "$log" >&2
  echo "create_env: pip install failed (output above)" >&2
  exit 1
fi
"$prefix/bin/python" -m pip check
echo "$want" >"$stamp"
echo "create_env: $prefix matches $(basename "$lock")"
