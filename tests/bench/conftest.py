"""The slow tier's scratch repository of two commits and their builds, made once per session.

Shared by the real A/B runs (tests/bench/test_bench_ab.py) and the real gate (tests/bench/test_bench_gate.py):
each build takes minutes, so the gate's seeded slowdown and the A/B's BASE are the same two builds.

  clean     this checkout, committed as it is
  recorded  `.ci/base` names clean: the landed commit the gate measures against
  slow      the build-time slowdown switch turned to SLOWDOWN_PERCENT (the work tree, built in root/build)
  old       clean without the A/B worker, on a side branch: a REF from before A/B runs (never built)

clean is built where `bench --against clean` looks for REF's build (root/build/ab/<clean>/build).
"""

from __future__ import annotations

import pytest

from bench.ab import driver as ab
from bench.ab import gate, scratch

SWITCH = "csrc/torch/slowdown.h"
SLOWDOWN_PERCENT = 10


def _slowed(header: str) -> str:
    default = "#define FUSED_NORM_SLOWDOWN_PERCENT 0\n"
    assert default in header, f"{SWITCH} no longer defaults the switch to 0: update tests/bench/conftest.py"
    return header.replace(default, f"#define FUSED_NORM_SLOWDOWN_PERCENT {SLOWDOWN_PERCENT}\n")


@pytest.fixture(scope="session")
def ab_repo(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ab") / "repo"
    root.mkdir()
    clean = scratch.snapshot(root)
    scratch.git("rm", "--quiet", ab.WORKER, cwd=root)
    scratch.git("commit", "--quiet", "-m", "before A/B runs", cwd=root)
    old = scratch.git("rev-parse", "HEAD", cwd=root)
    scratch.git("checkout", "--quiet", clean, cwd=root)
    gate.write_base(clean, root)
    scratch.git("add", str(gate.BASE_FILE), cwd=root)
    scratch.git("commit", "--quiet", "-m", "the landed commit, recorded", cwd=root)
    slow = scratch.commit_change(root, SWITCH, _slowed((root / SWITCH).read_text()), "fused op 10% slower")
    ref = root / "build" / "ab" / clean
    scratch.checkout(clean, ref / "src", root)
    scratch.build(root, root / "build", root / "build.log")
    scratch.build(ref / "src", ab.ref_build_dir(ref / "src"), ref / "build.log")
    return {"root": root, "clean": clean, "slow": slow, "old": old, "ref": ref}
