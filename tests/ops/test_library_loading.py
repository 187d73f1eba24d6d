"""`import ops` explains a missing or unloadable library instead of failing on a symbol name.

Each case runs in a fresh interpreter: this one has the library loaded already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from env.paths import REPO_ROOT, toolchain_record_path


def _import_ops(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_")}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-c", "import ops"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def library_with_undefined_symbol(tmp_path) -> Path:
    """A shared library that fails to load the way a stale build does: an undefined C++ symbol."""
    source = tmp_path / "stale.cpp"
    source.write_text(
        "void fusedbench_symbol_gone_after_upgrade();\n"
        "__attribute__((constructor)) static void init() { fusedbench_symbol_gone_after_upgrade(); }\n"
    )
    library = tmp_path / "stale.so"
    subprocess.run(["c++", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_not_built_says_how_to_build(tmp_path):
    result = _import_ops({"FUSEDBENCH_BUILD_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "LibraryNotBuiltError" in result.stderr
    assert "run `invoke build`" in result.stderr


def test_drifted_toolchain_is_named(tmp_path, library_with_undefined_symbol):
    record = json.loads(toolchain_record_path().read_text())
    record["torch"]["version"] = "2.12.0"
    record["torch"]["cxx11_abi"] = 0
    record["compiler"]["version"] = "c++ (GCC) 11.4.0"
    (tmp_path / "toolchain.json").write_text(json.dumps(record))
    result = _import_ops(
        {"FUSEDBENCH_BUILD_DIR": str(tmp_path), "FUSEDBENCH_TORCH_LIBRARY": str(library_with_undefined_symbol)}
    )
    assert result.returncode != 0
    assert "LibraryLoadError" in result.stderr
    import torch

    assert f"torch version: built with '2.12.0', running '{torch.__version__}'" in result.stderr
    assert "torch's _GLIBCXX_USE_CXX11_ABI: built with 0, running 1" in result.stderr
    assert "C++ compiler: built with 'c++ (GCC) 11.4.0'" in result.stderr
    assert "invoke build" in result.stderr


def test_same_toolchain_points_at_the_library(tmp_path, library_with_undefined_symbol):
    (tmp_path / "toolchain.json").write_text(toolchain_record_path().read_text())
    result = _import_ops(
        {"FUSEDBENCH_BUILD_DIR": str(tmp_path), "FUSEDBENCH_TORCH_LIBRARY": str(library_with_undefined_symbol)}
    )
    assert result.returncode != 0
    assert "matches the running one" in result.stderr
    assert "undefined symbol" in result.stderr


def test_import_ops_imports_nothing_of_the_tooling():
    # The installed wheel ships ops alone: the op, export, alignment and the
    # ORT helpers must not reach into env (paths, files, build system).
    script = (
        "import sys, ops, ops.op, ops.norms, ops.model, ops.onnx.export, ops.ort.session, ops.alignment.check\n"
        "print(' '.join(sorted(m for m in sys.modules if m == 'env' or m.startswith('env.'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == [], done.stdout
