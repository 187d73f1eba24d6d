"""The CPU kernel core's objects, compiled once by the torch library's JIT build and linked into the ORT library.

Both libraries carry the same kernel core (csrc/core/fused_norm_cpu.cpp, and
the cache probe csrc/platform/cpu_caches.cpp). The core is one translation
unit that keeps one core of the 2-core VM busy for 40-48 s, so compiling it
once for each library cost a third of a cold build's CPU time. In a JIT build
the torch library's ninja compiles it (its adapters compile beside it on the
other core) and the ORT library, whose adapters compile meanwhile, links those
objects: one compile, and both libraries run the very same machine code. The
core includes no torch header, so torch's flags leave it the plain C++ it is
(checked: its only undefined symbols are the C++ runtime's and libm's).

:class:`CoreObjects` is the handoff between the two steps' threads: the torch
run provides the objects (or its failure), the ORT run waits for them. Where
the torch library is up to date, its objects are on disk already; where they
are not (deleted, or an AOT build), the ORT library compiles its own copy.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from env.builder.commands import BuildError


def jit_object(source: Path, build_directory: Path) -> Path:
    """The object torch's cpp_extension.load compiles a C++ source to: its stem, ``.o``, in the build folder."""
    return build_directory / f"{source.stem}.o"


class CoreObjects:
    """The core's objects from the torch JIT build, once they exist; None where the ORT library compiles its own."""

    def __init__(self, sources: Sequence[Path], build_directory: Path) -> None:
        self.paths = [jit_object(source, build_directory) for source in sources]
        self._ready = threading.Event()
        self._available = False
        self._error: BaseException | None = None

    def from_disk(self) -> None:
        """The torch build does not run: its objects are those on disk, where they all are."""
        self._available = all(path.is_file() for path in self.paths)
        self._ready.set()

    def provide(self) -> None:
        """The torch build ended well: its objects must exist now."""
        missing = [str(path) for path in self.paths if not path.is_file()]
        if missing:
            self._error = BuildError(f"the torch op library's build left no kernel core object {', '.join(missing)}")
        self._available = not missing
        self._ready.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()

    def wait(self) -> list[Path] | None:
        """Block until the torch build has ended; its objects, or None where there are none to share."""
        self._ready.wait()
        if self._error is not None:
            raise BuildError(
                f"the kernel core objects come from the torch op library, whose build failed: {self._error}"
            )
        return list(self.paths) if self._available else None
