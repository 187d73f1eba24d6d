"""The built libraries link the C++ runtime as a shared library, whatever the compiler driver adds.

A library with a private copy of libstdc++, loaded into a process that already holds the shared one
(torch's), loses every number it formats (the stream fails; on another toolchain the process died):
env/builder/cxx_runtime.py. The build names -lstdc++ ahead of the driver's own runtime flags and checks
each library's dynamic section after the link.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from env.builder.commands import BuildError
from env.builder.cxx_runtime import (
    SHARED_CXX_RUNTIME_FLAGS,
    check_shared_cxx_runtime,
    compiler_default_runtime,
    needed_libraries,
)
from env.builder.toolchain import cxx_compiler
from env.paths import toolchain_record_path

FORMATS_A_NUMBER = r"""
#include <sstream>
#include <string>
extern "C" const char* format_number(double v, long n) {
  static std::string s;
  std::ostringstream o;
  o << "eps " << v << ", length " << n;
  s = o.str();
  return s.c_str();
}
"""

# What a compiler wrapper for portable binaries appends to every link.
WRAPPER_FLAGS = ["-static-libstdc++"]


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    """The same library linked as the wrapper alone would, and with the build's flags ahead of the wrapper's."""
    folder = tmp_path_factory.mktemp("cxx_runtime")
    source = folder / "format.cpp"
    source.write_text(FORMATS_A_NUMBER)
    built = {}
    for name, flags in (("private", WRAPPER_FLAGS), ("shared", [*SHARED_CXX_RUNTIME_FLAGS, *WRAPPER_FLAGS])):
        out = folder / f"{name}.so"
        done = subprocess.run(
            [cxx_compiler(), "-shared", "-fPIC", "-O2", str(source), *flags, "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"this compiler cannot link libstdc++ statically, so no wrapper can: {done.stderr[-300:]}")
        built[name] = out
    return built


def format_in_a_torch_process(library: Path) -> str:
    """format_number(1.5, 16) from ``library``, loaded into a process that holds torch's libstdc++."""
    code = (
        "import ctypes, sys, torch\n"
        "lib = ctypes.CDLL(sys.argv[1]); lib.format_number.restype = ctypes.c_char_p\n"
        "print(lib.format_number(ctypes.c_double(1.5), ctypes.c_long(16)).decode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(library)], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_the_build_s_flags_keep_libstdcxx_shared_under_a_static_runtime_wrapper(libraries):
    assert any(n.startswith("libstdc++.so") for n in needed_libraries(libraries["shared"]))
    assert check_shared_cxx_runtime(libraries["shared"]) == "libstdc++.so.6 (shared)"
    assert format_in_a_torch_process(libraries["shared"]) == "eps 1.5, length 16"


def test_a_library_with_a_private_runtime_fails_the_check_naming_the_cause(libraries):
    assert not any(n.startswith("libstdc++.so") for n in needed_libraries(libraries["private"]))
    with pytest.raises(
        BuildError, match=r"private\.so does not load libstdc\+\+ as a shared library .*-static-libstdc"
    ):
        check_shared_cxx_runtime(libraries["private"])


def test_the_built_libraries_were_linked_with_the_flags_and_record_a_shared_runtime():
    record = json.loads(toolchain_record_path().read_text())
    for key, artifact in (("torch_cxx_runtime", "torch_library"), ("ort_cxx_runtime", "ort_library")):
        assert record["build"][key] == "libstdc++.so.6 (shared)", key
        assert check_shared_cxx_runtime(Path(record["artifacts"][artifact])) == record["build"][key]
    # The link commands as they ran: torch's extension builder's ninja file, the ORT library's build log.
    library = Path(record["artifacts"]["torch_library"])  # jit: <out>/x.so; aot: <out>/ops/_C*.so, ninja in <out>/tmp
    ninja = (
        library.parent / "build.ninja"
        if record["build"]["mode"] == "jit"
        else library.parents[1] / "tmp" / "build.ninja"
    )
    ninja = ninja.read_text()
    ldflags = next(line for line in ninja.splitlines() if line.startswith("ldflags ="))
    ort_link = (Path(record["artifacts"]["ort_library"]).parent / "build.log").read_text().split("### link", 1)[1]
    for flag in SHARED_CXX_RUNTIME_FLAGS:
        assert flag in ldflags.split(), ldflags
        assert flag in ort_link.split(), ort_link


def test_the_record_says_how_the_compiler_links_the_runtime_by_default(libraries, tmp_path):
    # A wrapper like the GPU machine's: the real compiler with -static-libstdc++ appended to every command.
    wrapper = tmp_path / "g++-static-runtime"
    wrapper.write_text(f'#!/bin/sh\nexec {cxx_compiler()} "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    assert compiler_default_runtime(str(wrapper)) == "static (no libstdc++ dependency)"
    assert compiler_default_runtime(cxx_compiler()) == "libstdc++.so.6 (shared)"
    assert compiler_default_runtime(str(tmp_path / "no-such-compiler")) is None
    record = json.loads(toolchain_record_path().read_text())
    assert record["compiler"]["default_cxx_runtime"] == "libstdc++.so.6 (shared)"
