"""One C++ runtime per process: the libraries we build link libstdc++ as a shared library.

Both libraries are loaded into processes that already hold libstdc++.so.6 (torch's,
onnxruntime's). A compiler set up to link libstdc++ statically (``-static-libstdc++``,
as some portable-build wrappers add to every link) would put a second copy inside our
library. Its symbols then interpose only in part: code that formats a number into an
error message reaches the other copy's locale facets, and the number comes out empty
(reproduced with GCC 12 and torch). On a GPU machine whose compiler is a wrapper, every
error message of ours with a number in it crashed the process, and messages without
numbers did not: the same mechanism, we infer (that machine could not be probed again).

So every link names ``-lstdc++`` itself, ahead of anything the driver appends: the
linker then resolves the runtime from the shared library and a later static archive
adds nothing. After each link, :func:`check_shared_cxx_runtime` reads the library's
dynamic section and fails the build if libstdc++ is not a shared dependency.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from env.builder.commands import BuildError

# Linked before the compiler driver's own runtime flags (see the module docstring).
SHARED_CXX_RUNTIME_FLAGS = ("-lstdc++",)


def needed_libraries(library: Path) -> list[str] | None:
    """The DT_NEEDED entries of an ELF shared object, or None when readelf is not installed."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    out = subprocess.run([readelf, "-dW", str(library)], capture_output=True, text=True, check=True).stdout
    # Lines like: 0x0000000000000001 (NEEDED)  Shared library: [libstdc++.so.6]
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line and "[" in line]


def _shared_runtime(needed: list[str]) -> str | None:
    """The libstdc++ among a library's DT_NEEDED entries, or None."""
    return next((name for name in needed if name.startswith("libstdc++.so")), None)


def compiler_default_runtime(compiler: str) -> str | None:
    """How ``compiler`` links libstdc++ into a shared library when given no runtime flags: a wrapper that adds
    ``-static-libstdc++`` shows here as "static". None where the compiler or readelf is missing."""
    if shutil.which(compiler) is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        library = Path(folder) / "probe.so"
        source = "#include <string>\nstd::string probe(long n) { return std::to_string(n); }\n"
        done = subprocess.run(
            [compiler, "-shared", "-fPIC", "-x", "c++", "-", "-o", str(library)],
            input=source,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return None
        needed = needed_libraries(library)
    if needed is None:
        return None
    runtime = _shared_runtime(needed)
    return f"{runtime} (shared)" if runtime else "static (no libstdc++ dependency)"


def check_shared_cxx_runtime(library: Path) -> str:
    """What the library links as its C++ runtime; BuildError when it is not the shared libstdc++."""
    needed = needed_libraries(library)
    if needed is None:
        return "not checked (readelf is not installed)"
    runtime = _shared_runtime(needed)
    if runtime is None:
        raise BuildError(
            f"{library} does not load libstdc++ as a shared library (its dependencies: {', '.join(needed)}): the "
            "compiler linked a private copy of the C++ runtime into it, and a process with two copies loses or "
            "crashes on every number formatted into an error message. Check the compiler's link flags "
            "(-static-libstdc++, a wrapper script) or point CXX at a compiler that links it dynamically."
        )
    return f"{runtime} (shared)"


__all__ = ["SHARED_CXX_RUNTIME_FLAGS", "check_shared_cxx_runtime", "compiler_default_runtime", "needed_libraries"]
