"""``invoke build``: record the toolchain, then run each build step whose inputs changed.

Steps: the torch op library (JIT or AOT), the ONNX Runtime custom-op library,
the CUDA compile check. Each step's inputs (the contents of its sources and of
the project headers they include, its flags, the toolchain facts, the build
code that runs it) are hashed (env/builder/fingerprint.py); a step whose hash
matches its last successful run is skipped with one "up to date" line, so a
build with nothing to do takes a fraction of a second and prints four lines.
The steps that do run, run side by side (:func:`build` says why), and their
lines, record fragments and state files follow the plan's order all the same.

The toolchain record build/toolchain.json is rewritten on every build, before
compiling, so a failed build still leaves the facts needed to understand it;
``import ops`` finds the libraries through it. Its slow part (torch's
``collect_env``) is cached under the same toolchain facts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from env.builder import cuda, fingerprint, ptxas, toolchain
from env.builder.config import (
    CXX_STANDARD_PORTABLE,
    CXX_STANDARD_TORCH,
    SLOWDOWN_VARIABLE,
    TORCH_LD_FLAGS,
    benchmark_core_versions,
    core_cpu_sources,
    core_cuda_sources,
    core_versions,
    core_versions_for,
    core_versions_label,
    cuda_build_possible,
    cxx_opt_flags,
    march_native_requested,
    pinned_cuda_arch_list,
    platform_cpu_sources,
    slowdown_percent,
    torch_cxx_flags,
    torch_extension_spec,
    torch_nvcc_flags,
    torch_sources,
)
from env.builder.core_objects import CoreObjects
from env.builder.cxx_runtime import check_shared_cxx_runtime
from env.builder.ort_library import build_ort_library, common_sources, decide_cuda, ort_cxx_flags
from env.builder.torch_library import build_aot, build_jit, jit_dir
from env.files import write_text_atomic
from env.paths import REPO_ROOT, build_dir, csrc_dir, toolchain_record_path

# The build code each step runs: a change to it (a flag written inline, say) reruns the step.
_TORCH_CODE = ("env/builder/config.py", "env/builder/torch_library.py", "env/builder/cxx_runtime.py", "setup.py")
_ORT_CODE = (
    "env/builder/config.py",
    "env/builder/core_objects.py",
    "env/builder/torch_library.py",
    "env/builder/cxx_runtime.py",
    "env/builder/ort_library.py",
    "env/builder/ort_headers.py",
    "env/builder/ort_runtime.py",
)
_CUDA_CODE = (
    "env/builder/config.py",
    "env/builder/torch_library.py",
    "env/builder/cuda.py",
    "env/builder/ptxas.py",
    "env/builder/toolkit.py",
    "env/builder/ort_headers.py",
)

# Environment variables the steps read. FUSEDBENCH_CORE_VERSIONS is not among them: its choice is in the compile
# flags (env/builder/config.py, core_level_defines), so "all" and an unset variable, which build alike, rebuild nothing.
_BUILD_VARIABLES = (
    "CXX",
    "CUDA_HOME",
    "FUSEDBENCH_MARCH_NATIVE",
    "FUSEDBENCH_ORT_CUDA",
    "FUSEDBENCH_ORT_HEADERS",
    SLOWDOWN_VARIABLE,
)


@dataclass
class BuildResult:
    record: dict[str, Any]
    record_path: Path


@dataclass(frozen=True)
class Step:
    """One build step: what it reads (hashed), how it runs, and what it leaves behind."""

    name: str  # its state file: build/state/<name>.json
    title: str  # how the console names it
    inputs: Callable[[dict[str, Any]], dict[str, Any]]  # toolchain facts -> everything the output depends on
    # Called in the build's own thread, before any step runs, when this one is to run; returns the run, which fills
    # a record fragment {build, artifacts, timings_s} in a thread of its own, beside the other steps' runs.
    prepare: Callable[[], Callable[[dict[str, Any]], None]]
    outputs: Callable[[dict[str, Any]], list[str]]  # files of a fragment that must still exist
    describe: Callable[[dict[str, Any]], str]  # one line about a fragment's result
    # A step a benchmark does not need: how a benchmark's build records leaving it (None: every build runs it).
    left_by_benchmarks: Callable[[dict[str, Any]], None] | None = None


def state_dir() -> Path:
    return build_dir() / "state"


# --- inputs ------------------------------------------------------------------------


def _include_dirs() -> list[Path]:
    return [csrc_dir(), csrc_dir() / "core", csrc_dir() / "ort"]


def _sources_digest(sources: list[Path]) -> dict[str, str]:
    return fingerprint.files_digest(fingerprint.include_closure(sources, _include_dirs()), csrc_dir())


def _code_digest(paths: tuple[str, ...]) -> dict[str, str]:
    return fingerprint.files_digest([REPO_ROOT / p for p in paths if (REPO_ROOT / p).is_file()], REPO_ROOT)


def _common_inputs(facts: dict[str, Any], code: tuple[str, ...]) -> dict[str, Any]:
    return {
        "toolchain": facts,
        "variables": {name: os.environ.get(name) for name in _BUILD_VARIABLES},
        "code": _code_digest(code),
    }


def torch_with_cuda(facts: dict[str, Any]) -> bool:
    """:func:`env.builder.config.cuda_build_possible` from the toolchain facts, without importing torch."""
    return facts["torch"].get("cuda") is not None and facts["nvcc"]["path"] is not None


def torch_inputs(mode: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def inputs(facts: dict[str, Any]) -> dict[str, Any]:
        with_cuda = torch_with_cuda(facts)
        return {
            **_common_inputs(facts, _TORCH_CODE),
            "mode": mode,
            "sources": _sources_digest(torch_sources(with_cuda)),
            "flags": {
                "cxx": torch_cxx_flags(),
                "ld": list(TORCH_LD_FLAGS),
                "nvcc": torch_nvcc_flags() if with_cuda else [],
            },
        }

    return inputs


def ort_inputs(mode: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def inputs(facts: dict[str, Any]) -> dict[str, Any]:
        found = _ort_inputs(facts)
        if mode == "jit":  # the kernel core is the torch build's objects (env/builder/core_objects.py)
            found["flags"]["kernel_core"] = torch_cxx_flags()
        return found

    return inputs


def _ort_inputs(facts: dict[str, Any]) -> dict[str, Any]:
    from env.builder.ort_headers import NPM_PACKAGE, NPM_VERSION

    with_cuda = ort_with_cuda(facts)
    sources = common_sources() + [csrc_dir() / "ort" / ("ort_cuda_op.cc" if with_cuda else "ort_cuda_op_stub.cc")]
    sources += core_cuda_sources() if with_cuda else []
    return {
        **_common_inputs(facts, _ORT_CODE),
        "sources": _sources_digest(sources),
        "exports": _sources_digest([csrc_dir() / "ort" / "exports.lds"]),
        "flags": {"cxx": ort_cxx_flags(), "link": cxx_opt_flags()},
        "ort_headers": _ort_headers_identity(NPM_PACKAGE, NPM_VERSION),
    }


def ort_with_cuda(facts: dict[str, Any]) -> bool:
    """:func:`env.builder.ort_library.decide_cuda`, cached under the facts it depends on.

    Deciding probes onnxruntime's CUDA provider in a child process (seconds);
    the answer only changes with the toolchain, the environment variables or
    the presence of the CUDA sources.
    """
    key = fingerprint.key_of(
        {
            "toolchain": facts,
            "variables": {n: os.environ.get(n) for n in _BUILD_VARIABLES},
            "cuda_sources": [p.is_file() for p in core_cuda_sources()],
        }
    )
    path = state_dir() / "ort_cuda_decision.json"
    try:
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return bool(cached["with_cuda"])
    except (OSError, ValueError, KeyError):
        pass
    with_cuda, reason = decide_cuda()
    write_text_atomic(path, json.dumps({"key": key, "with_cuda": with_cuda, "reason": reason}) + "\n")
    return with_cuda


def _ort_headers_identity(package: str, version: str) -> dict[str, Any]:
    """The headers the ORT steps compile against: an explicit folder's contents, else the npm pin."""
    explicit = os.environ.get("FUSEDBENCH_ORT_HEADERS")
    if not explicit:
        return {"npm": f"{package}@{version}"}
    folder = Path(explicit)
    return {"folder": str(folder), "files": fingerprint.files_digest(sorted(folder.glob("*.h")), folder)}


def cuda_check_inputs(facts: dict[str, Any]) -> dict[str, Any]:
    from env.builder.ort_headers import NPM_PACKAGE, NPM_VERSION

    adapters = [csrc_dir() / "torch" / "torch_cuda_impl.cpp", csrc_dir() / "ort" / "ort_cuda_op.cc"]
    return {
        **_common_inputs(facts, _CUDA_CODE),
        "sources": _sources_digest(core_cuda_sources() + adapters),
        "flags": {"nvcc": cuda.kernel_nvcc_base_flags(), "adapters": [CXX_STANDARD_TORCH, CXX_STANDARD_PORTABLE]},
        "ort_headers": _ort_headers_identity(NPM_PACKAGE, NPM_VERSION),
        "skipped": cuda.skip_asked(),  # a skipped check runs again in the next build that does not skip it
    }


# --- runs --------------------------------------------------------------------------


def _run_torch(mode: str, core: CoreObjects | None) -> Callable[[dict[str, Any]], None]:
    # The JIT spec is resolved here, in the build's own thread: with CUDA, torch_extension_spec() writes the pinned
    # TORCH_CUDA_ARCH_LIST into os.environ, which the other steps' threads read as they start their compilers.
    start = time.perf_counter()
    spec = torch_extension_spec() if mode == "jit" else None
    versions, one_version = core_versions_label(), core_versions() != "all"

    def run(fragment: dict[str, Any]) -> None:
        try:
            library = build_jit(spec) if spec is not None else build_aot()
        except BaseException as error:
            if core is not None:
                core.fail(error)  # the ORT run waiting for the core's objects fails too, rather than waiting forever
            raise
        if core is not None:
            core.provide()
        fragment["timings_s"][f"torch_{mode}"] = round(time.perf_counter() - start, 1)
        fragment["artifacts"]["torch_library"] = str(library)
        fragment["build"]["torch_cxx_runtime"] = check_shared_cxx_runtime(library)
        fragment["build"]["kernel_core_versions"] = versions
        fragment["build"]["kernel_core_one_version"] = one_version

    return run


def _run_ort(core: CoreObjects | None) -> Callable[[dict[str, Any]], None]:
    def run(fragment: dict[str, Any]) -> None:
        build_ort_library(fragment, core_objects=core.wait if core is not None else None)

    return run


def core_objects(mode: str) -> CoreObjects | None:
    """The handoff of the kernel core's objects from the torch build to the ORT build: JIT builds only (an AOT
    build's objects lie in setup.py's temporary folder, and the ORT library then compiles its own)."""
    return CoreObjects(core_cpu_sources() + platform_cpu_sources(), jit_dir()) if mode == "jit" else None


def _cuda_check_left(fragment: dict[str, Any]) -> None:
    fragment["build"]["cuda_resource_report"] = {"status": "skipped", "reason": cuda.FOR_BENCHMARKS}


def _cuda_outputs(fragment: dict[str, Any]) -> list[str]:
    entry = fragment["build"].get("cuda_resource_report", {})
    return [*fragment["artifacts"].get("cuda_objects", {}).values(), *([entry["json"]] if "json" in entry else [])]


def steps(mode: str, core: CoreObjects | None = None) -> list[Step]:
    """The build's steps; ``core``: the handoff of the kernel core's objects from the torch step to the ORT step."""
    return [
        Step(
            f"torch_{mode}",
            f"torch op library ({mode})",
            torch_inputs(mode),
            lambda: _run_torch(mode, core),
            lambda f: [f["artifacts"]["torch_library"]],
            lambda f: _with_core_versions(f, _shown(f["artifacts"]["torch_library"])),
        ),
        Step(
            "ort_library",
            "ONNX Runtime custom-op library",
            ort_inputs(mode),
            lambda: _run_ort(core),
            lambda f: [f["artifacts"]["ort_library"]],
            lambda f: _shown(f["artifacts"]["ort_library"]),
        ),
        Step(
            "cuda_compile_check",
            "CUDA compile check",
            cuda_check_inputs,
            lambda: cuda.run_in_build,
            _cuda_outputs,
            lambda f: ptxas.describe(f["build"].get("cuda_resource_report", {})),
            left_by_benchmarks=_cuda_check_left,  # it builds nothing a benchmark loads (28-40 s of a 2-core build)
        ),
    ]


def _with_core_versions(fragment: dict[str, Any], line: str) -> str:
    """The line, naming the kernel core's version where the library holds one alone (a benchmark's build)."""
    one_version = fragment["build"].get("kernel_core_one_version", False)
    return f"{line} (kernel core: {fragment['build']['kernel_core_versions']})" if one_version else line


def _shown(path: str) -> str:
    """A path relative to the working directory when it is below it (shorter lines)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


# --- state -------------------------------------------------------------------------


def _read_state(step: Step) -> dict[str, Any] | None:
    path = state_dir() / f"{step.name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_state(step: Step, key: str, inputs: dict[str, Any], fragment: dict[str, Any]) -> None:
    write_text_atomic(
        state_dir() / f"{step.name}.json",
        json.dumps({"key": key, "inputs": inputs, "fragment": fragment}, indent=1, sort_keys=True) + "\n",
    )


def is_up_to_date(step: Step, key: str, state: dict[str, Any] | None) -> bool:
    """The last successful run had these inputs and its outputs are still there."""
    if state is None or state.get("key") != key:
        return False
    try:
        return all(Path(p).exists() for p in step.outputs(state["fragment"]))
    except KeyError:
        return False


def _merge(record: dict[str, Any], fragment: dict[str, Any]) -> None:
    for section in ("build", "artifacts", "timings_s"):
        record.setdefault(section, {}).update(fragment.get(section, {}))


# --- the toolchain record ----------------------------------------------------------


def _settings(mode: str) -> dict[str, Any]:
    import torch

    with_cuda, cuda_reason = cuda_build_possible()
    return {
        "mode": mode,
        "cxx_standard": {
            "torch_extension": CXX_STANDARD_TORCH,
            "kernel_core_in_torch_extension": CXX_STANDARD_TORCH,
            "ort_library": CXX_STANDARD_PORTABLE,
            # A JIT build links the torch build's core objects into the ORT library (env/builder/core_objects.py);
            # the build's "ort_kernel_core" says which it did.
            "kernel_core_in_ort_library": CXX_STANDARD_TORCH if mode == "jit" else CXX_STANDARD_PORTABLE,
            "cuda_objects": CXX_STANDARD_PORTABLE,
        },
        "cxx_flags": cxx_opt_flags(),
        "kernel_core_versions": core_versions_label(),
        "march_native": march_native_requested(),
        "slowdown_percent": slowdown_percent(),  # nonzero only in an experiment's build (csrc/torch/slowdown.h)
        # Passed explicitly as -D_GLIBCXX_USE_CXX11_ABI (env/builder/config.py).
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        # Pinned in environment.lock.yml; every CUDA build uses it (env/builder/config.py).
        "torch_cuda_arch_list": pinned_cuda_arch_list(),
        "torch_cuda_kernels": with_cuda,
        "torch_cuda_kernels_reason": cuda_reason,
    }


def _base_record(mode: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The toolchain part of the record (no artifacts), from the cache while the facts are unchanged."""
    key = fingerprint.key_of(
        {
            "facts": facts,
            "mode": mode,
            "flags": cxx_opt_flags(),
            "code": _code_digest(
                (
                    "env/builder/toolchain.py",
                    "env/builder/cxx_runtime.py",
                    "env/builder/config.py",
                    "env/builder/steps.py",
                )
            ),
            "cuda_sources": [p.is_file() for p in torch_sources(True)],
        }
    )
    record = toolchain.collect_cached(key, lambda: _settings(mode), state_dir() / f"toolchain_{mode}.json")
    return {**record, "build": dict(record.get("build", {})), "artifacts": {}, "timings_s": {}}


def _write_record(record: dict[str, Any]) -> None:
    """Rewrite the record only when its content changed (a no-op build leaves the file alone)."""
    path = toolchain_record_path()
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    if not (path.is_file() and path.read_text() == text):
        write_text_atomic(path, text)


# --- the build ---------------------------------------------------------------------


@dataclass
class _Work:
    """What a build does about one step: reuse its last result, leave it (a benchmarks build), or run it."""

    step: Step
    fragment: dict[str, Any]
    to_run: bool = False
    line: str = ""  # the console's line, when the step does not run
    key: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    run: Callable[[dict[str, Any]], None] | None = None
    began: float = 0.0
    ended: float | None = None  # when its run ended, failed or not
    error: BaseException | None = None


def _decide(step: Step, facts: dict[str, Any], state: dict[str, Any] | None, for_benchmarks: bool) -> _Work:
    inputs = step.inputs(facts)
    key = fingerprint.key_of(inputs)
    if is_up_to_date(step, key, state):
        fragment = state["fragment"]
        detail = step.describe(fragment)
        line = f"{step.title}: {detail if detail.startswith('skipped') else 'up to date - ' + detail}"
        return _Work(step, fragment, line=line)
    fragment = {"build": {}, "artifacts": {}, "timings_s": {}}
    if for_benchmarks and step.left_by_benchmarks is not None:
        step.left_by_benchmarks(fragment)  # no state written: the next full build runs the step
        return _Work(step, fragment, line=f"{step.title}: {step.describe(fragment)}")
    changed = fingerprint.changed_inputs((state or {}).get("inputs"), inputs)
    return _Work(step, fragment, to_run=True, key=key, inputs=inputs, changed=changed)


def _run(work: _Work) -> None:
    """In a worker thread: the step's run; its failure is kept for the build's thread to raise."""
    try:
        work.run(work.fragment)
    except BaseException as error:
        work.error = error
    finally:
        work.ended = time.perf_counter()


def _print_line(work: _Work, verbose: bool) -> None:
    step, fragment = work.step, work.fragment
    line = work.line or (
        f"{step.title}: built in {work.ended - work.began:.1f} s (changed: {', '.join(work.changed)}) - "
        f"{step.describe(fragment)}"
    )
    print(line, flush=True)
    if verbose and step.name == "cuda_compile_check":
        table = ptxas.report_table(fragment["build"].get("cuda_resource_report", {}))
        if table:
            print(table, flush=True)


def build(mode: str = "jit", verbose: bool = False, for_benchmarks: bool = False) -> BuildResult:
    """Run every step of the build (``mode`` jit or aot for the torch library) whose inputs changed.

    ``for_benchmarks``: a benchmark's build, which runs only the steps a benchmark needs; another step that is not
    up to date is left for the next full build and recorded as not run (its result, when up to date, is kept). Its
    kernel core holds the version this CPU's loader runs alone (env/builder/config.py, core_versions).
    """
    if mode not in ("jit", "aot"):
        raise ValueError(f"mode must be 'jit' or 'aot', got {mode!r}")
    with core_versions_for(benchmark_core_versions() if for_benchmarks and mode == "jit" else "all"):
        return _build(mode, verbose, for_benchmarks)


def _build(mode: str, verbose: bool, for_benchmarks: bool) -> BuildResult:
    build_dir().mkdir(parents=True, exist_ok=True)
    facts = toolchain.quick_facts()
    record = _base_record(mode, facts)
    core = core_objects(mode)
    plan = steps(mode, core)
    states = {step.name: _read_state(step) for step in plan}
    for state in states.values():  # until a step reruns, the record names what its last run left
        if state:
            _merge(record, state.get("fragment", {}))
    _write_record(record)
    print(toolchain.quick_summary(facts), flush=True)
    if verbose:
        print(toolchain.format_summary(record), flush=True)

    work = [_decide(step, facts, states[step.name], for_benchmarks) for step in plan]
    runs = [w for w in work if w.to_run]
    for w in runs:
        w.began = time.perf_counter()
        try:
            w.run = w.step.prepare()
        except Exception as error:  # raised below like a failed run: the other steps still run
            w.error = error
    if core is not None:  # the torch step's run provides the core's objects; where it does not run, they are on disk
        torch_work = next(w for w in work if w.step.name == f"torch_{mode}")
        if not torch_work.to_run:
            core.from_disk()
        elif torch_work.run is None:
            core.fail(torch_work.error)

    # The runs go side by side: the kernel core (csrc/core/fused_norm_cpu.cpp) is one translation unit that alone
    # keeps one core busy for 40-48 s, so on the 2-core VM one step after the other left the second core mostly
    # idle. In a JIT build the torch step compiles the core and the ORT step links its objects (``core``, which
    # the ORT run waits on after compiling its adapters); no step reads another's output otherwise (each writes
    # its own folder under build/ and its own fragment; the CUDA check compiles the adapters to objects of its
    # own), and every run mostly waits on compiler processes, hence threads. What this function changes in the
    # process (os.environ through the torch spec, build/state, the record, the console) it changes in this thread:
    # the inputs and preparations above, the lines, fragments and states below.
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(runs))) as pool:
            futures = {w.step.name: pool.submit(_run, w) for w in runs if w.run is not None}
            for w in work:  # the lines in plan order, each as soon as its run has ended
                if w.step.name in futures:
                    futures[w.step.name].result()
                if w.error is None:
                    _print_line(w, verbose)
    finally:  # once every run has ended: fragments and states in plan order, what a failed step learnt included
        for w in work:
            _merge(record, w.fragment)
            if w.ended is not None and w.error is None:  # a run that ended well
                _write_state(w.step, w.key, w.inputs, w.fragment)
        _write_record(record)
    failed = [w for w in work if w.error is not None]
    if failed:  # the first failure in plan order, as a build of one step after the other raised it
        for other in failed[1:]:
            failed[0].error.add_note(f"{other.step.title} failed too: {other.error}")
        raise failed[0].error
    return BuildResult(record=record, record_path=toolchain_record_path())


def print_toolchain() -> bool:
    """Print the last build's toolchain table and CUDA resource table; False when nothing was built yet."""
    if not toolchain_record_path().is_file():
        return False
    record = toolchain.read_record()
    print(toolchain.format_summary(record))
    table = ptxas.report_table(record.get("build", {}).get("cuda_resource_report", {}))
    if table:
        print(table)
    return True


def up_to_date_fragment(step_name: str, mode: str = "jit") -> dict[str, Any] | None:
    """What the last run of a step left (its record fragment) when its inputs have not changed since
    and its outputs still exist; None when the step would run again."""
    step = next((s for s in steps(mode) if s.name == step_name), None)
    if step is None:
        raise ValueError(f"step must be one of {', '.join(s.name for s in steps(mode))}, got {step_name!r}")
    state = _read_state(step)
    if state is None or not is_up_to_date(step, fingerprint.key_of(step.inputs(toolchain.quick_facts())), state):
        return None
    return state["fragment"]
