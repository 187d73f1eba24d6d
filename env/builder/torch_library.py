"""Build the torch op library: JIT (torch.utils.cpp_extension.load) or AOT (setup.py).

Both read the same :class:`env.builder.config.TorchExtensionSpec`, so they compile
the same sources with the same flags. Each build runs in a child process whose
whole output (ninja -v prints every compiler command line) goes to a log file
next to the build; the console gets one line per step, and the log's tail when
something fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from env.builder.commands import BuildError, run_logged
from env.builder.compiler_cache import compiler_cache_env
from env.builder.config import TORCH_EXTENSION_NAME, TorchExtensionSpec, torch_extension_spec
from env.paths import build_dir


def jit_dir() -> Path:
    return build_dir() / "jit"


def aot_dir() -> Path:
    return build_dir() / "aot"


def build_jit(spec: TorchExtensionSpec) -> Path:
    """Compile with cpp_extension.load into build/jit (ninja: only changed files recompile)."""
    out = jit_dir()
    out.mkdir(parents=True, exist_ok=True)
    request = {
        "sources": [str(s) for s in spec.sources],
        "include_dirs": [str(d) for d in spec.include_dirs],
        "cxx_flags": spec.cxx_flags,
        "ld_flags": spec.ld_flags,
        "nvcc_flags": spec.nvcc_flags,
        "with_cuda": spec.with_cuda,
        "build_directory": str(out),
    }
    run_logged(
        [sys.executable, "-m", "env.builder.torch_library", json.dumps(request)],
        out / "build.log",
        env=compiler_cache_env(),
    )
    _write_compile_commands(out)
    library = out / f"{TORCH_EXTENSION_NAME}.so"
    if not library.exists():
        raise BuildError(f"JIT build finished but {library} is missing; see {out / 'build.log'}")
    return library


def build_aot() -> Path:
    """Compile with setup.py (BuildExtension) into build/aot, the delivery path."""
    out = aot_dir()
    cmd = [
        sys.executable,
        "setup.py",
        "--quiet",
        "build_ext",
        "--build-lib",
        str(out),
        "--build-temp",
        str(out / "tmp"),
    ]
    run_logged(cmd, out / "build.log", env=compiler_cache_env())
    _write_compile_commands(out / "tmp")
    libraries = sorted((out / "ops").glob("_C*.so"))
    if not libraries:
        raise BuildError(f"AOT build finished but no ops/_C*.so in {out}; see {out / 'build.log'}")
    return libraries[0]


def _write_compile_commands(ninja_dir: Path) -> None:
    """Full compiler command lines of the last build, as ninja would run them."""
    if not (ninja_dir / "build.ninja").exists():
        return
    commands = subprocess.run(["ninja", "-t", "commands"], cwd=ninja_dir, capture_output=True, text=True, check=False)
    (ninja_dir / "compile_commands.log").write_text(commands.stdout)


def _jit_child(request: dict) -> None:
    # Runs in the child process: cpp_extension prints ninja's verbose output
    # to fd 1, which the parent redirected into the log.
    from torch.utils.cpp_extension import load

    path = load(
        name=TORCH_EXTENSION_NAME,
        sources=request["sources"],
        extra_cflags=request["cxx_flags"],
        extra_ldflags=request["ld_flags"],
        extra_cuda_cflags=request["nvcc_flags"] or None,
        extra_include_paths=request["include_dirs"],
        build_directory=request["build_directory"],
        with_cuda=request["with_cuda"],
        is_python_module=False,
        verbose=True,
    )
    print(f"built and loaded {path}")


if __name__ == "__main__":
    _jit_child(json.loads(sys.argv[1]))


__all__ = ["build_aot", "build_jit", "torch_extension_spec"]
