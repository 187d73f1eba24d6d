#!/usr/bin/env bash
# Run an invoke task inside the locked environment, creating it first if needed.
#
#   scripts/with_env.sh bench --baseline all     # the main job (builds first)
#   scripts/with_env.sh test                     # the test suite (builds first)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${FUSEDBENCH_ENV:-$repo/.venv}
"$repo/scripts/create_env.sh"
cd "$repo"
exec "$prefix/bin/invoke" "$@"
