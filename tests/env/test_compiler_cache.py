"""ccache in front of the library builds: the environment it runs in, and a second checkout of the same
sources taking the first one's objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import env.builder.compiler_cache as compiler_cache
from env.builder.ort_library import ort_cxx_flags
from env.builder.toolchain import cxx_compiler
from env.paths import REPO_ROOT, csrc_dir


def test_the_cache_environment_puts_ccache_first_and_names_this_checkout(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    (links / "c++").symlink_to("/bin/true")
    monkeypatch.setattr(compiler_cache, "CCACHE_LINKS", links)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.delenv("FUSEDBENCH_CCACHE", raising=False)
    cache = compiler_cache.compiler_cache_env()
    assert cache["PATH"].split(os.pathsep)[0] == str(links)
    assert cache["CCACHE_BASEDIR"] == str(REPO_ROOT) and cache["CCACHE_NOHASHDIR"] == "1"
    monkeypatch.setenv("CCACHE_BASEDIR", "/elsewhere")  # a setting of the caller's wins
    assert compiler_cache.compiler_cache_env()["CCACHE_BASEDIR"] == "/elsewhere"
    monkeypatch.setenv("FUSEDBENCH_CCACHE", "0")
    # Off: no ccache links first, and torch's cpp_extension must not put ccache in front of the compiler either.
    off = compiler_cache.compiler_cache_env()
    assert off["PATH"] == os.environ["PATH"] and off[compiler_cache.NO_TORCH_WRAPPER] == "1"
    assert "CCACHE_BASEDIR" not in off or off["CCACHE_BASEDIR"] == os.environ.get("CCACHE_BASEDIR")


def test_with_the_cache_off_torchs_extension_builder_calls_the_compiler_itself(monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setenv("FUSEDBENCH_CCACHE", "0")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")  # as if ccache and sccache were installed
    monkeypatch.setattr(os, "environ", compiler_cache.compiler_cache_env())
    assert cpp_extension._wrap_compiler("c++") == ["c++"]
    monkeypatch.delenv(compiler_cache.NO_TORCH_WRAPPER)
    assert cpp_extension._wrap_compiler("c++") == ["ccache", "c++"]  # what the variable turns off


@pytest.mark.skipif(
    shutil.which("ccache") is None or not (compiler_cache.CCACHE_LINKS / "c++").exists(),
    reason="ccache is not installed (Debian: apt-get install ccache); the builds then compile everything",
)
def test_a_second_checkout_of_the_same_sources_compiles_from_the_first_ones_objects(tmp_path, monkeypatch):
    # Two checkouts at different paths, each compiling as the ONNX Runtime library's build does: from its
    # root, with its own folder on the command line. Only the first compiles; the second is a cache hit.
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    source = Path("platform") / "cpu_caches.cpp"
    for checkout in ("first", "second"):
        root = tmp_path / checkout / "tree"
        for folder in ("platform", "core"):
            shutil.copytree(csrc_dir() / folder, root / "csrc" / folder)
        monkeypatch.setattr(compiler_cache, "REPO_ROOT", root)
        command = [cxx_compiler(), *ort_cxx_flags(), "-I", str(root / "csrc"), "-c", str(root / "csrc" / source)]
        out = root / "cpu_caches.o"
        subprocess.run([*command, "-o", str(out)], cwd=root, env=compiler_cache.compiler_cache_env(), check=True)
        assert out.stat().st_size > 0
    stats = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=True).stdout
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    assert int(counts["cache_miss"]) == 1, stats
    assert int(counts["direct_cache_hit"]) + int(counts["preprocessed_cache_hit"]) == 1, stats
    first, second = ((tmp_path / c / "tree" / "cpu_caches.o").read_bytes() for c in ("first", "second"))
    assert first == second
