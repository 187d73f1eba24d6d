"""The incremental build: a step reruns exactly when a hashed input changed.

Hash-level tests change one input at a time (a header of a copied csrc/, a
flag, the compiler) and compare the three steps' keys; one test really
rebuilds the ONNX Runtime library after a source edit and checks that the
other steps stayed untouched. The steps that run, run side by side: stand-ins
that sleep show it, and that a failure waits for the other runs.
"""

from __future__ import annotations

import json
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest

from env.builder import config, cuda, fingerprint, steps, toolchain, torch_library
from env.builder.commands import BuildError
from env.paths import REPO_ROOT, toolchain_record_path

STEP_NAMES = ("torch_jit", "ort_library", "cuda_compile_check")


@pytest.fixture(autouse=True)
def private_build_dir(tmp_path, monkeypatch) -> Path:
    """Steps keep small caches under build/state; these tests keep theirs apart from the real build."""
    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(tmp_path / "build"))
    return tmp_path / "build"


@pytest.fixture(scope="module")
def facts() -> dict:
    return toolchain.quick_facts()


@pytest.fixture
def csrc_copy(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "csrc"
    shutil.copytree(REPO_ROOT / "csrc", copy)
    monkeypatch.setenv("FUSEDBENCH_CSRC_DIR", str(copy))
    return copy


def keys(facts: dict) -> dict[str, str]:
    return {step.name: fingerprint.key_of(step.inputs(facts)) for step in steps.steps("jit")}


def changed_steps(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


def test_include_closure_follows_project_headers_only():
    csrc = REPO_ROOT / "csrc"
    closure = fingerprint.include_closure([csrc / "ort" / "ort_cpu_op.cc"], [csrc, csrc / "core", csrc / "ort"])
    names = {p.relative_to(csrc).as_posix() for p in closure}
    assert {"ort/ort_cpu_op.cc", "ort/ort_ops.h", "ort/ort_norm_op.h", "core/fused_norm.h"} <= names
    assert all(p.is_file() and p.is_relative_to(csrc) for p in closure)  # <onnxruntime_cxx_api.h> etc. are toolchain


def test_keys_are_stable_when_nothing_changed(facts, csrc_copy):
    assert keys(facts) == keys(facts)
    (csrc_copy / "core" / "fused_norm.h").touch()  # a new mtime, the same bytes
    assert not changed_steps(keys(toolchain.quick_facts()), keys(facts))


@pytest.mark.parametrize(
    "header, expected",
    [
        # every step compiles the core
        ("core/fused_norm.h", {"torch_jit", "ort_library", "cuda_compile_check"}),
        # the ORT library, and the compile check of the ORT CUDA adapter
        ("ort/ort_ops.h", {"ort_library", "cuda_compile_check"}),
        # the torch library, and the compile check of the torch CUDA adapter
        ("torch/torch_adapter.h", {"torch_jit", "cuda_compile_check"}),
    ],
)
def test_a_changed_header_reruns_exactly_the_steps_that_include_it(facts, csrc_copy, header, expected):
    before = keys(facts)
    path = csrc_copy / header
    path.write_text(path.read_text() + "\n// changed\n")
    assert changed_steps(before, keys(facts)) == expected


def test_a_file_no_step_includes_changes_nothing(facts, csrc_copy):
    before = keys(facts)
    (csrc_copy / "core" / "unused_notes.h").write_text("// included by nothing\n")
    assert not changed_steps(before, keys(facts))


def test_a_changed_flag_reruns_the_steps_that_use_it(facts, monkeypatch):
    before = keys(facts)
    monkeypatch.setattr(config, "OPT_FLAGS", [*config.OPT_FLAGS, "-fno-strict-aliasing"])
    assert changed_steps(before, keys(facts)) == {"torch_jit", "ort_library"}
    monkeypatch.undo()
    monkeypatch.setattr(cuda, "kernel_nvcc_base_flags", lambda: ["-std=c++17", "-O2"])
    assert changed_steps(before, keys(facts)) == {"cuda_compile_check"}
    monkeypatch.undo()
    monkeypatch.setenv("FUSEDBENCH_MARCH_NATIVE", "1")
    assert changed_steps(before, keys(facts)) >= {"torch_jit", "ort_library"}


def test_the_kernel_versions_variable_reruns_steps_only_where_it_changes_the_flags(facts, monkeypatch):
    monkeypatch.delenv(config.CORE_VERSIONS_VARIABLE, raising=False)
    unset = keys(facts)
    monkeypatch.setenv(config.CORE_VERSIONS_VARIABLE, "all")
    assert keys(facts) == unset  # "all" builds what an unset variable builds (outside a benchmark): nothing reruns
    monkeypatch.setenv(config.CORE_VERSIONS_VARIABLE, "loader")
    one_version = changed_steps(unset, keys(facts))
    assert one_version == ({"torch_jit", "ort_library"} if config.core_level_defines() else set())


def test_a_build_asked_to_skip_the_cuda_check_records_why_and_the_next_one_reruns_it(facts, monkeypatch):
    def no_check():
        raise AssertionError("the check ran although a skip was asked for")

    before = keys(facts)
    monkeypatch.setenv(cuda.SKIP_VARIABLE, "1")
    monkeypatch.setattr(cuda, "compile_check", no_check)
    record = {"build": {}, "artifacts": {}, "timings_s": {}}
    cuda.run_in_build(record)
    entry = record["build"]["cuda_resource_report"]
    assert entry["status"] == "skipped" and entry["reason"].startswith(f"{cuda.SKIP_VARIABLE}=1"), entry
    # Only that step's key changes, so the next build without the variable runs the check again.
    assert changed_steps(before, keys(facts)) == {"cuda_compile_check"}
    monkeypatch.setenv(cuda.SKIP_VARIABLE, "0")
    assert not changed_steps(before, keys(facts))


def test_a_changed_compiler_reruns_every_step(facts, tmp_path, monkeypatch):
    before = keys(facts)
    # The same g++ behind another name and another version line: what an upgrade looks like.
    wrapper = tmp_path / "c++-next"
    wrapper.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "c++ (next) 99.1.0"; exit 0; fi\nexec c++ "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXX", str(wrapper))
    now = toolchain.quick_facts()
    assert now["compiler"]["version"] == "c++ (next) 99.1.0" and now["compiler"]["path"] == str(wrapper)
    assert changed_steps(before, keys(now)) == set(STEP_NAMES)


def test_changed_toolchain_facts_rerun_every_step(facts):
    before = keys(facts)
    for group, field, value in (
        ("compiler", "version", "c++ (Debian 12.3.0-1) 12.3.0"),  # upgraded in place
        ("torch", "version_py_sha256", "0" * 64),
        ("nvcc", "version", "13.9 (V13.9.1)"),
        ("python", "version", "3.11.99"),
    ):
        changed = {**facts, group: {**facts[group], field: value}}
        assert changed_steps(before, keys(changed)) == set(STEP_NAMES), group
    assert changed_steps(before, keys({**facts, "cuda_arch_list": "9.0;10.0+PTX"})) == set(STEP_NAMES)


def test_toolchain_record_is_collected_once_per_facts(tmp_path, monkeypatch):
    calls = []

    def fake_collect(settings):
        calls.append(settings)
        return {"torch": {"version": "x"}, "build": settings}

    monkeypatch.setattr(toolchain, "collect", fake_collect)
    cache = tmp_path / "cache.json"
    first = toolchain.collect_cached("key-a", lambda: {"mode": "jit"}, cache)
    again = toolchain.collect_cached("key-a", lambda: {"mode": "jit"}, cache)
    assert first == again == {"torch": {"version": "x"}, "build": {"mode": "jit"}} and len(calls) == 1
    toolchain.collect_cached("key-b", lambda: {"mode": "jit"}, cache)
    assert len(calls) == 2


@pytest.mark.slow
def test_editing_an_ort_source_rebuilds_only_the_ort_library(tmp_path, csrc_copy, monkeypatch, capsys):
    # The ORT step runs for real; the torch library and the CUDA check are
    # stood in for by recorders (their real runs take minutes), but their keys
    # and skip decisions are the real ones.
    ran: list[str] = []

    def fake_torch(mode, core):
        def run(fragment):
            ran.append(f"torch_{mode}")
            library = tmp_path / "build" / "fake_torch.so"
            library.write_bytes(b"")
            fragment["artifacts"]["torch_library"] = str(library)
            core.from_disk()  # no kernel core objects to share: the ORT library compiles its own

        return run

    def fake_cuda(fragment):
        ran.append("cuda_compile_check")
        fragment["build"]["cuda_resource_report"] = {"status": "skipped", "reason": "stood in for by the test"}

    monkeypatch.setattr(steps, "_run_torch", fake_torch)
    monkeypatch.setattr(cuda, "run_in_build", fake_cuda)

    first = steps.build("jit")
    library = Path(first.record["artifacts"]["ort_library"])
    assert sorted(ran) == ["cuda_compile_check", "torch_jit"] and library.is_file()  # side by side: either order
    built = library.stat()
    capsys.readouterr()

    steps.build("jit")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and not any("built in" in line for line in lines), lines
    assert [line.split(":")[0] for line in lines if "up to date" in line] == [
        "torch op library (jit)",
        "ONNX Runtime custom-op library",
    ], lines
    assert len(ran) == 2 and library.stat().st_ino == built.st_ino

    source = csrc_copy / "ort" / "ort_cpu_op.cc"
    source.write_text(source.read_text() + "\n// edited\n")
    record = steps.build("jit").record
    out = capsys.readouterr().out
    assert len(ran) == 2, "only the ORT library depends on that file"
    assert "ONNX Runtime custom-op library: built in" in out and "ort/ort_cpu_op.cc" in out, out
    assert library.stat().st_ino != built.st_ino  # linked anew and renamed into place
    assert record["artifacts"]["torch_library"] == first.record["artifacts"]["torch_library"]


def test_a_step_s_last_result_is_reused_only_while_its_inputs_and_outputs_hold(facts, csrc_copy, private_build_dir):
    step = next(s for s in steps.steps("jit") if s.name == "cuda_compile_check")
    report = private_build_dir / "cuda" / "resource_report.json"
    report.parent.mkdir(parents=True)
    report.write_text("{}")
    fragment = {
        "build": {"cuda_resource_report": {"status": "compiled", "json": str(report)}},
        "artifacts": {"cuda_objects": {}},
        "timings_s": {},
    }
    assert steps.up_to_date_fragment("cuda_compile_check") is None  # never ran here
    steps._write_state(step, fingerprint.key_of(step.inputs(facts)), step.inputs(facts), fragment)
    assert steps.up_to_date_fragment("cuda_compile_check") == fragment
    (csrc_copy / "core" / "fused_norm_cuda.cu").write_text("// edited\n", encoding="utf-8")
    assert steps.up_to_date_fragment("cuda_compile_check") is None  # an input changed
    shutil.copy(REPO_ROOT / "csrc" / "core" / "fused_norm_cuda.cu", csrc_copy / "core" / "fused_norm_cuda.cu")
    assert steps.up_to_date_fragment("cuda_compile_check") == fragment
    report.unlink()
    assert steps.up_to_date_fragment("cuda_compile_check") is None  # its output is gone
    with pytest.raises(ValueError, match="step must be one of torch_jit, ort_library, cuda_compile_check"):
        steps.up_to_date_fragment("cuda")


def test_a_benchmarks_build_leaves_a_stale_cuda_check_to_the_next_full_build(tmp_path, monkeypatch, capsys):
    # Every step stood in for by a recorder; the keys, the up-to-date decisions and the record are the real ones.
    # One kernel-version choice for both kinds of build (a benchmark's compiles the loader's version alone by
    # default, so its libraries would be rebuilt too): what differs here is the CUDA check alone.
    monkeypatch.setenv(config.CORE_VERSIONS_VARIABLE, "all")
    ran: list[str] = []

    def output(name: str) -> str:
        path = tmp_path / "build" / name
        path.write_text("")
        return str(path)

    def fake_torch(mode, core):
        def run(fragment):
            ran.append(f"torch_{mode}")
            fragment["artifacts"]["torch_library"] = output("fake_torch.so")

        return run

    def fake_ort(core):
        def run(fragment):
            ran.append("ort_library")
            fragment["artifacts"]["ort_library"] = output("fake_ort.so")

        return run

    def fake_cuda(fragment):
        ran.append("cuda_compile_check")
        entry = {"status": "compiled", "json": output("report.json"), "targets": ["sm_90"]}
        entry["summary"] = {"kernels": 1, "max_registers": {"sm_90": 40}, "spilling_kernels": []}
        fragment["build"]["cuda_resource_report"] = entry
        fragment["artifacts"]["cuda_objects"] = {}

    monkeypatch.setattr(steps, "_run_torch", fake_torch)
    monkeypatch.setattr(steps, "_run_ort", fake_ort)
    monkeypatch.setattr(cuda, "run_in_build", fake_cuda)
    monkeypatch.delenv(cuda.SKIP_VARIABLE, raising=False)

    record = steps.build("jit", for_benchmarks=True).record
    assert sorted(ran) == ["ort_library", "torch_jit"]  # side by side: either order
    assert record["build"]["cuda_resource_report"] == {"status": "skipped", "reason": cuda.FOR_BENCHMARKS}
    assert f"CUDA compile check: skipped ({cuda.FOR_BENCHMARKS})" in capsys.readouterr().out
    assert steps.up_to_date_fragment("cuda_compile_check") is None  # no state written: still to run

    steps.build("jit")  # the full build runs what the benchmark's left, and only that
    assert len(ran) == 3 and ran[2] == "cuda_compile_check"
    record = steps.build("jit", for_benchmarks=True).record  # an up-to-date check's result is kept
    assert len(ran) == 3
    assert record["build"]["cuda_resource_report"]["status"] == "compiled"


def test_the_steps_that_run_run_side_by_side_and_print_in_plan_order(tmp_path, monkeypatch, capsys):
    # Each stand-in sleeps 1 s, as a step mostly waits on its compilers: one after the other they take 3 s.
    spans: dict[str, tuple[float, float]] = {}
    threads: dict[str, int] = {}

    def output(name: str) -> str:
        path = tmp_path / "build" / name
        path.write_text("")
        return str(path)

    def slow(name: str) -> None:
        threads[name] = threading.get_ident()
        start = time.perf_counter()
        time.sleep(1.0)
        spans[name] = (start, time.perf_counter())

    def fake_torch(mode, core):
        threads["torch prepared"] = threading.get_ident()  # the JIT spec's os.environ write happens here

        def run(fragment):
            slow(f"torch_{mode}")
            fragment["artifacts"]["torch_library"] = output("fake_torch.so")

        return run

    def fake_ort(core):
        def run(fragment):
            slow("ort_library")
            fragment["artifacts"]["ort_library"] = output("fake_ort.so")

        return run

    def fake_cuda(fragment):
        slow("cuda_compile_check")
        fragment["build"]["cuda_resource_report"] = {"status": "skipped", "reason": "stood in for by the test"}

    monkeypatch.setattr(steps, "_run_torch", fake_torch)
    monkeypatch.setattr(steps, "_run_ort", fake_ort)
    monkeypatch.setattr(cuda, "run_in_build", fake_cuda)

    record = steps.build("jit").record
    assert set(spans) == set(STEP_NAMES)
    first_start, last_end = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
    assert max(s for s, _ in spans.values()) < min(e for _, e in spans.values()), spans  # all three at once
    assert last_end - first_start < 1.9, spans
    assert threads["torch prepared"] == threading.get_ident()  # prepared in the build's own thread
    assert len({threads[name] for name in STEP_NAMES} | {threading.get_ident()}) == 4  # each run in its own
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == [
        "torch op library (jit)",
        "ONNX Runtime custom-op library",
        "CUDA compile check",
    ], lines
    assert all(": built in 1." in line for line in lines), lines
    assert record["artifacts"]["torch_library"] and record["artifacts"]["ort_library"]
    assert all(steps.up_to_date_fragment(name) is not None for name in STEP_NAMES)


def test_a_failed_step_is_raised_once_the_others_ended_with_every_fragment_merged(tmp_path, monkeypatch, capsys):
    # The ORT stand-in fails after 0.3 s and the CUDA one at once, while the torch one takes 1 s and succeeds.
    ended: list[str] = []

    def fake_torch(mode, core):
        def run(fragment):
            time.sleep(1.0)
            library = tmp_path / "build" / "fake_torch.so"
            library.write_text("")
            fragment["artifacts"]["torch_library"] = str(library)
            ended.append(f"torch_{mode}")

        return run

    def fake_ort(core):
        def run(fragment):
            time.sleep(0.3)
            fragment["build"]["ort_headers"] = {"summary": "learnt before the compile failed"}
            raise BuildError("c++ failed (exit 1); the ORT library's compile")

        return run

    def fake_cuda(fragment):  # fails first, but comes after the ORT library in the plan
        fragment["build"]["cuda_resource_report"] = {"status": "failed", "reason": "stood in for by the test"}
        raise cuda.CudaCheckError("nvcc failed (exit 1); the CUDA check's compile")

    monkeypatch.setattr(steps, "_run_torch", fake_torch)
    monkeypatch.setattr(steps, "_run_ort", fake_ort)
    monkeypatch.setattr(cuda, "run_in_build", fake_cuda)

    with pytest.raises(BuildError) as raised:
        steps.build("jit")
    assert ended == ["torch_jit"]  # raised once the slow step had ended, not when the first failure came
    assert str(raised.value) == "c++ failed (exit 1); the ORT library's compile"  # the first in plan order
    assert raised.value.__notes__ == ["CUDA compile check failed too: nvcc failed (exit 1); the CUDA check's compile"]
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == 1 and lines[0].startswith("torch op library (jit): built in 1."), lines
    record = json.loads(toolchain_record_path().read_text())  # every fragment, the failed steps' included
    assert record["artifacts"]["torch_library"] == str(tmp_path / "build" / "fake_torch.so")
    assert record["build"]["ort_headers"] == {"summary": "learnt before the compile failed"}
    assert record["build"]["cuda_resource_report"]["status"] == "failed"
    assert steps.up_to_date_fragment("torch_jit") is not None  # the step that succeeded keeps its result
    assert steps.up_to_date_fragment("ort_library") is None and steps.up_to_date_fragment("cuda_compile_check") is None


def _core_handoff_stand_ins(tmp_path: Path, torch_fails: bool):
    """A torch run that makes the kernel core's objects in 0.5 s (or fails), an ORT run that waits for them."""
    waited: dict[str, object] = {}

    def fake_torch(mode, core):
        def run(fragment):
            time.sleep(0.5)
            if torch_fails:
                core.fail(BuildError("c++ failed (exit 1); the torch library's compile"))
                raise BuildError("c++ failed (exit 1); the torch library's compile")
            for path in core.paths:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")
            fragment["artifacts"]["torch_library"] = str(tmp_path / "build" / "fake_torch.so")
            (tmp_path / "build" / "fake_torch.so").write_text("")
            core.provide()

        return run

    def fake_ort(core):
        def run(fragment):
            began = time.perf_counter()
            try:
                waited["objects"] = core.wait()
            finally:
                waited["s"] = time.perf_counter() - began
            fragment["artifacts"]["ort_library"] = str(tmp_path / "build" / "fake_ort.so")
            (tmp_path / "build" / "fake_ort.so").write_text("")

        return run

    return fake_torch, fake_ort, waited


@pytest.mark.parametrize("torch_fails", [False, True])
def test_the_ort_library_links_the_kernel_core_the_torch_build_compiled(tmp_path, monkeypatch, torch_fails):
    fake_torch, fake_ort, waited = _core_handoff_stand_ins(tmp_path, torch_fails)
    monkeypatch.setattr(steps, "_run_torch", fake_torch)
    monkeypatch.setattr(steps, "_run_ort", fake_ort)
    monkeypatch.setattr(cuda, "run_in_build", lambda fragment: None)
    if torch_fails:  # the ORT run is told, rather than left waiting for objects that will never come
        with pytest.raises(BuildError, match="torch library's compile") as raised:
            steps.build("jit", for_benchmarks=True)
        assert "ONNX Runtime custom-op library failed too" in raised.value.__notes__[0]
        assert "objects" not in waited and waited["s"] >= 0.4
        return
    steps.build("jit", for_benchmarks=True)
    jit = torch_library.jit_dir()
    assert waited["objects"] == [jit / "fused_norm_cpu.o", jit / "cpu_caches.o"] and waited["s"] >= 0.4
    # With the torch library up to date, its objects on disk serve a rebuilt ORT library at once.
    (tmp_path / "build" / "fake_ort.so").unlink()
    steps.build("jit", for_benchmarks=True)
    assert waited["objects"] == [jit / "fused_norm_cpu.o", jit / "cpu_caches.o"] and waited["s"] < 0.1
    # Gone from disk: none to share (the ORT library then compiles its own).
    (jit / "cpu_caches.o").unlink()
    (tmp_path / "build" / "fake_ort.so").unlink()
    steps.build("jit", for_benchmarks=True)
    assert waited["objects"] is None


def test_an_aot_build_shares_no_kernel_core_objects():
    assert steps.core_objects("aot") is None
    assert steps.core_objects("jit").paths[0].name == "fused_norm_cpu.o"
