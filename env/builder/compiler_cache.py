"""The environment a library build's compilers run in: ccache in front of them, or (asked) nothing in front."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from env.paths import REPO_ROOT

# ccache's folder of compiler links (Debian's ccache package): first in PATH,
# `c++` runs through the cache, so compiling sources and flags that compiled
# before (a rebuild after an edit is undone, the AOT build of the tests) takes
# seconds. The output is the compiler's own, hence not an input of any step.
# Ninja compiles in the build folder, and setup.py's -g would make ccache hash
# that folder too: CCACHE_NOHASHDIR lets another build folder (the tests'
# private ones) hit, at the price of debug info naming the first folder.
# CCACHE_BASEDIR, the checkout being built: ccache hashes the paths under it
# relative to the compiler's folder, so another checkout of the same sources
# (an A/B run's base, the tests' scratch repositories) takes the objects this
# one compiled, where the compiler runs in the same place relative to its tree.
CCACHE_LINKS = Path("/usr/lib/ccache")


# torch's cpp_extension puts ccache (or sccache) in front of the compiler by itself wherever one is on PATH,
# unless this variable is set: FUSEDBENCH_CCACHE=0 sets it, or the torch library would still compile through
# ccache (and a "cold" build time taken that way would read ccache's hits).
NO_TORCH_WRAPPER = "TORCH_NO_COMPILER_WRAPPER"


def compiler_cache_env() -> dict[str, str] | None:
    """The environment of a library build: ccache in front of the compiler when it is installed and
    FUSEDBENCH_CCACHE is not 0; with FUSEDBENCH_CCACHE=0, this process's environment with torch's own
    compiler wrapper turned off; None (this process's environment, unchanged) where ccache is not installed.
    Variables already set (CCACHE_BASEDIR, CCACHE_DIR, ...) win over these."""
    if os.environ.get("FUSEDBENCH_CCACHE", "1") == "0":
        return {**os.environ, NO_TORCH_WRAPPER: "1"}
    if shutil.which("ccache") is None:
        return None
    if not (CCACHE_LINKS / "c++").exists():
        return None
    defaults = {"CCACHE_NOHASHDIR": "1", "CCACHE_BASEDIR": str(REPO_ROOT)}
    return {**defaults, **os.environ, "PATH": f"{CCACHE_LINKS}{os.pathsep}{os.environ.get('PATH', '')}"}
