"""Malformed and hostile models for myops::fused_norm and myops::fused_add_norm: clean errors or correct results.

The corpus (tests/helpers/hostile_graphs.py) is generated afresh, written to a
temporary folder and run by ONNX Runtime with the custom-op library in worker
processes with a deadline per case (tests/helpers/hostile_run.py). No case may
crash, abort or hang; each ends as a correct result, ORT's own refusal, or the
op's error naming the operand. The coverage table by case kind is printed and
written to build/hostile/coverage-<library>.txt.
"""

from __future__ import annotations

import pytest

from env.paths import build_dir
from ops._library import ort_library_path
from tests.helpers.hostile_graphs import KINDS, corpus, write_corpus
from tests.helpers.hostile_run import coverage, coverage_text, problem, timed_run

# Every kind of malformation the corpus must hold, each with at least a few models.
REQUIRED_KINDS = {
    "input_count", "rank", "dtype", "vector_length", "dynamic_dims", "zero_dims", "overflow", "attributes",
    "epsilon", "empty", "output_types", "graph_inputs",
}  # fmt: skip


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory):
    cases = corpus()
    folder = tmp_path_factory.mktemp("hostile")
    write_corpus(cases, folder)
    return folder


def judged(results: list[dict]) -> list[str]:
    return [f"{r['kind']} {r['name']}: {why}" for r in results if (why := problem(r))]


def log_coverage(results: list[dict], seconds: float, label: str) -> str:
    text = coverage_text(results, seconds)
    out = build_dir() / "hostile" / f"coverage-{label}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(f"\nhostile-graph corpus, {label} library:\n{text}")
    return text


def test_the_corpus_covers_every_kind_with_500_models():
    cases = corpus()
    assert len(cases) >= 500, len(cases)
    kinds = {c.kind for c in cases}
    assert REQUIRED_KINDS <= kinds <= set(KINDS), kinds
    per_kind = {k: sum(c.kind == k for c in cases) for k in REQUIRED_KINDS}
    assert min(per_kind.values()) >= 5, per_kind
    # Both ops in every kind, and every ONNX element type as X.
    for kind in REQUIRED_KINDS:
        assert {c.name.split("/")[0] for c in cases if c.kind == kind} == {"fused_norm", "fused_add_norm"}, kind
    names = {c.name for c in cases if c.kind == "dtype"}
    from tests.helpers.hostile_graphs import ALL_TYPES, type_name

    assert all(f"fused_norm/X-{type_name(t)}" in names for t in ALL_TYPES)


def test_no_model_crashes_hangs_or_gets_a_wrong_answer(corpus_folder):
    results, seconds = timed_run(corpus_folder, ort_library_path(), slots=2, deadline=60)
    log_coverage(results, seconds, "release")
    assert judged(results) == []
    table = coverage(results)
    # The corpus reaches the op itself in every kind: ORT's refusals alone would prove nothing about it.
    for kind in REQUIRED_KINDS - {"input_count", "output_types"}:
        assert table[kind].get("correct", 0) + table[kind].get("op_error", 0) > 0, (kind, table[kind])


def test_a_crashing_worker_is_reported_and_the_run_goes_on(corpus_folder, tmp_path):
    # A library whose every kernel aborts the process: each case that reaches the op must come back as a crash,
    # and the cases after it must still run (ORT's refusals before the op stay refusals).
    import subprocess

    source = tmp_path / "abort.cc"
    source.write_text('#include <cstdlib>\nextern "C" void* RegisterCustomOps(void*, const void*) { std::abort(); }\n')
    library = tmp_path / "libabort.so"
    subprocess.run(["c++", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    few = _first_cases(corpus_folder, tmp_path / "few", 6)
    results, _ = timed_run(few, library, slots=1, deadline=60)
    assert [r["outcome"] for r in results] == ["crash"] * 6


def _first_cases(corpus_folder, folder, count: int):
    import json

    manifest = json.loads((corpus_folder / "manifest.json").read_text())[:count]
    folder.mkdir()
    for entry in manifest:
        for suffix in (".onnx", ".npz"):
            name = f"{entry['index']:04d}{suffix}"
            (folder / name).write_bytes((corpus_folder / name).read_bytes())
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.slow  # the sanitizer build of the library and the corpus under ASan: minutes on 2 cores
def test_the_corpus_under_asan_and_ubsan_gives_no_report(corpus_folder, tmp_path):
    import subprocess

    from tests.helpers.sanitized_ort import build_sanitized_library, sanitizer_env, sanitizer_reports

    library = build_sanitized_library()
    # Its core holds the one version this CPU runs: no entry point is an indirect function (ifunc) to choose.
    symbols = subprocess.run(["nm", str(library)], capture_output=True, text=True, check=True).stdout
    assert "clone_rows" in symbols
    assert [line for line in symbols.splitlines() if " i " in line] == []
    logs = tmp_path / "sanitizer-logs"
    results, seconds = timed_run(corpus_folder, library, slots=2, deadline=180, env=sanitizer_env(logs))
    log_coverage(results, seconds, "asan-ubsan")
    reports = sanitizer_reports(logs)
    assert reports == [], "\n\n".join(p.read_text()[:3000] for p in reports[:3])
    assert judged(results) == []


@pytest.mark.slow  # part of the sanitizer check: seconds, but only meaningful beside it
def test_the_sanitizer_setup_catches_a_heap_overflow(corpus_folder, tmp_path):
    # The same preload and options must see a real bug in a loaded library: otherwise 0 reports proves nothing.
    import subprocess

    from tests.helpers.sanitized_ort import SANITIZER_FLAGS, sanitizer_env, sanitizer_reports

    source = tmp_path / "overflow.cc"
    source.write_text(
        "#include <cstdlib>\n"
        'extern "C" void* RegisterCustomOps(void*, const void*) {\n'
        "  volatile char* p = static_cast<char*>(std::malloc(8));\n"
        "  char c = p[8];  // one past the end\n"
        "  std::free((void*)p);\n"
        "  return reinterpret_cast<void*>(c == 42 ? 1 : 0);\n"
        "}\n"
    )
    library = tmp_path / "liboverflow.so"
    subprocess.run(["c++", "-shared", "-fPIC", *SANITIZER_FLAGS, "-o", str(library), str(source)], check=True)
    logs = tmp_path / "logs"
    few = _first_cases(corpus_folder, tmp_path / "few", 1)
    results, _ = timed_run(few, library, slots=1, deadline=60, env=sanitizer_env(logs))
    assert results[0]["outcome"] == "crash"
    (report,) = sanitizer_reports(logs)
    assert "heap-buffer-overflow" in report.read_text()
