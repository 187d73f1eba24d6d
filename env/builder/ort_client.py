"""Build the C++ example client csrc/ort/examples/ort_client.cc into build/ort_client/ort_client.

    invoke ort.client        # builds (if the source changed) and prints the binary's path

The client links ONNX Runtime's own C library from the installed wheel
(``onnxruntime/capi/libonnxruntime.so.<version>``) and compiles against the
pinned headers the custom-op library uses (env/builder/ort_headers.py). The
wheel's file has no plain ``libonnxruntime.so`` name to link with, and the
loader looks for its soname ``libonnxruntime.so.1``: both are symlinks in
build/ort_client/lib, which the binary's rpath names.
"""

from __future__ import annotations

from pathlib import Path

from env.builder.commands import BuildError, run_logged
from env.builder.compiler_cache import compiler_cache_env
from env.builder.ort_headers import ensure_ort_headers
from env.builder.ort_runtime import runtime_library
from env.builder.toolchain import cxx_compiler
from env.files import atomic_path
from env.paths import build_dir, csrc_dir

SOURCE = "ort/examples/ort_client.cc"


def client_dir() -> Path:
    return build_dir() / "ort_client"


def _link_runtime(lib_dir: Path) -> None:
    try:
        runtime = runtime_library()
    except RuntimeError as error:
        raise BuildError(f"cannot find ONNX Runtime's C library to link the client with: {error}") from error
    lib_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libonnxruntime.so", "libonnxruntime.so.1"):
        link = lib_dir / name
        if link.is_symlink() or link.exists():
            if link.resolve() == runtime.resolve():
                continue
            link.unlink()
        link.symlink_to(runtime)


def build_ort_client(force: bool = False) -> Path:
    """The client binary, compiled when missing or older than its source."""
    source = csrc_dir() / SOURCE
    out = client_dir()
    binary, lib_dir = out / "ort_client", out / "lib"
    _link_runtime(lib_dir)
    if not force and binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    headers = ensure_ort_headers()
    # Compile and link apart: ccache caches compiles only, so a fresh checkout whose sources and flags
    # compiled before (the same machine's cache) gets the object in a second instead of about 15 s.
    obj = out / "ort_client.o"
    compile_command = [
        cxx_compiler(),
        "-std=c++17",
        "-O2",
        "-Wall",
        "-Wextra",
        "-pthread",
        "-isystem",
        str(headers.path),
        "-c",
        str(source),
        "-o",
        str(obj),
    ]
    run_logged(compile_command, out / "build.log", env=compiler_cache_env())
    with atomic_path(binary) as tmp:
        link_command = [
            cxx_compiler(),
            "-pthread",
            str(obj),
            "-o",
            str(tmp),
            f"-L{lib_dir}",
            "-lonnxruntime",
            f"-Wl,-rpath,{lib_dir}",
        ]
        run_logged(link_command, out / "link.log")
        tmp.chmod(0o755)
    return binary
