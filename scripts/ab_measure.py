"""How well `bench --against` tells noise from a slowdown on this machine: repeated A/A and injected-slowdown runs.

    python scripts/ab_measure.py aa --runs 5                  # this checkout against HEAD, quick grid
    python scripts/ab_measure.py slowdown --percent 20 --runs 5 [--calibrate NEW.csv] [--baseline fused]

``aa`` runs `bench --quick --against HEAD` RUNS times and prints, per run, the
regressions and the largest ratios (median and best round) with the load.

``slowdown`` makes the fused op PERCENT % slower in a temporary commit and runs
it `--against` the clean commit RUNS times, printing per fused row whether it
was flagged. The slowdown is a wait added inside the op's CPU impl (torch
adapter), sized per case as PERCENT % of the row's median per call in a quick
report of this machine (``--calibrate``; default the newest NEW report of an
A/B run under reports/ab): so the op as called, dispatch included, is PERCENT %
slower at every shape, where an extra pass over the row would add little to a
dispatch-bound call. A model row calls the op once per norm (5 norms), so each
of those calls waits 1/5 of PERCENT % of the model's median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench import ab  # noqa: E402
from bench.compare import REGRESSION, compare_reports  # noqa: E402
from bench.report import read_report  # noqa: E402
from bench.run import BenchOptions, reports_dir  # noqa: E402
from env.paths import REPO_ROOT  # noqa: E402

IMPL = "csrc/torch/torch_cpu_impl.cpp"
MODEL_NORMS = 5  # ops/model.py's default model: 2 blocks x 2 norms + the final norm


def _largest(comparison) -> tuple[str, float, float]:
    top = max(comparison.rows, key=lambda r: r.ratio)
    best = max(comparison.rows, key=lambda r: r.best_round_ratio)
    return f"{'/'.join(top.key[3:])} {top.key[1]}", top.ratio, best.best_round_ratio


def aa(runs: int, options: BenchOptions, console: Console) -> None:
    table = Table(title=f"A/A: this checkout --against HEAD, {runs} run(s)")
    for name in ("run", "exit", "regressions", "largest ratio (row)", "largest best-round ratio", "max other CPU"):
        table.add_column(name)
    for index in range(runs):
        result = ab.run_ab("HEAD", options, console)
        comparison = compare_reports(result.base_csv, result.new_csv)
        row, ratio, best = _largest(comparison)
        busy = max(read_report(result.new_csv).other_cpu_share.max(), read_report(result.base_csv).other_cpu_share.max())
        table.add_row(str(index + 1), str(result.code), str(len(comparison.regressions)), f"{ratio:.3f} ({row})", f"{best:.3f}", f"{100 * busy:.0f}%")
    console.print(table)


def _spin_table(calibration: pd.DataFrame, percent: float) -> list[tuple[int, int, bool, int]]:
    """(numel, hidden, out variant, extra ns) per fused case of the calibration report."""
    entries = []
    for r in calibration[calibration.baseline == "fused"].itertuples():
        dims = [int(d) for d in r.shape.split("x")]
        numel, hidden = 1, dims[-1]
        for d in dims:
            numel *= d
        share = 1.0 / MODEL_NORMS if r.workload == "model" else 1.0
        if r.workload == "model":
            hidden = 128  # the model's d_model: its norms see [batch, seq, 128]
        entries.append((numel, hidden, r.variant == "out", round(r.median_us * 1e3 * percent / 100 * share)))
    return entries


def _slowed_impl(source: str, entries: list[tuple[int, int, bool, int]]) -> str:
    call_end, out_end = "  return y;\n}", "  run_cpu(x.contiguous(), weight.contiguous(), bias.contiguous(), out, eps);\n}"
    if call_end not in source or out_end not in source:
        raise SystemExit(f"{IMPL} changed: cannot place the injected wait - update scripts/ab_measure.py")
    rows = "\n".join(f"    {{{n}, {h}, {'true' if o else 'false'}, {ns}}}," for n, h, o, ns in entries)
    helper = (
        "#include <chrono>\n#include <cstdint>\nnamespace {\n"
        "struct InjectedWait { int64_t numel, hidden; bool out; int64_t ns; };\n"
        f"constexpr InjectedWait kInjected[] = {{\n{rows}\n}};\n"
        "void injected_wait(const at::Tensor& x, bool out) {  // a deliberate slowdown (scripts/ab_measure.py)\n"
        "  for (const InjectedWait& w : kInjected) {\n"
        "    if (w.numel != x.numel() || w.hidden != x.size(-1) || w.out != out) continue;\n"
        "    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(w.ns);\n"
        "    while (std::chrono::steady_clock::now() < until) {\n    }\n"
        "  }\n}\n}  // namespace\n"
    )
    source = source.replace('#include "torch_adapter.h"\n', '#include "torch_adapter.h"\n' + helper, 1)
    source = source.replace(call_end, "  injected_wait(x, false);\n" + call_end, 1)
    return source.replace(out_end, out_end[:-1] + "  injected_wait(x, true);\n}", 1)


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=ab_measure", "-c", "user.email=ab@fusedbench.invalid", *args]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def slowdown(runs: int, percent: float, calibrate: Path | None, options: BenchOptions, console: Console) -> None:
    if calibrate is None:
        found = sorted(reports_dir().glob("ab/*/new/*.csv"))
        if not found:
            raise SystemExit("no A/B report to calibrate with: run `aa` first or pass --calibrate REPORT.csv")
        calibrate = found[-1]
    entries = _spin_table(read_report(calibrate), percent)
    console.print(f"calibrated from {calibrate}: " + ", ".join(f"numel {n} hidden {h} {'out' if o else 'call'} +{ns} ns" for n, h, o, ns in entries))
    with tempfile.TemporaryDirectory(prefix="fusedbench-slowdown-") as tmp:
        repo = Path(tmp) / "repo"
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
        for name in filter(None, listed.decode().split("\0")):
            source = REPO_ROOT / name
            if source.is_file() and not source.is_symlink():
                (repo / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, repo / name)
        _git(repo, "init", "--quiet")
        _git(repo, "add", "--force", "-A")
        _git(repo, "commit", "--quiet", "-m", "clean")
        clean = _git(repo, "rev-parse", "HEAD")
        impl = repo / IMPL
        impl.write_text(_slowed_impl(impl.read_text(), entries))
        _git(repo, "commit", "--quiet", "-am", f"fused op {percent:g}% slower")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_") and k != "PYTHONPATH"}
        env["FUSEDBENCH_BUILD_DIR"] = str(repo / "build")
        subprocess.run([sys.executable, "-m", "invoke", "build"], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
        results: dict[str, list[str]] = {}
        for _ in range(runs):
            result = ab.run_ab(clean, options, console, new=ab.Tree(repo, repo / "build"))
            for r in compare_reports(result.base_csv, result.new_csv).rows:
                if r.key[3] == "fused":
                    mark = "FLAGGED" if r.verdict == REGRESSION else r.verdict
                    results.setdefault(f"{r.key[0]} {r.key[1]} fused/{r.key[4]}", []).append(f"{mark} {r.ratio:.2f}/{r.best_round_ratio:.2f}")
    table = Table(title=f"fused op {percent:g}% slower, --against the clean commit: verdict ratio/best-round ratio per run")
    table.add_column("row")
    for index in range(runs):
        table.add_column(f"run {index + 1}")
    table.add_column("flagged")
    for row, marks in results.items():
        table.add_row(row, *marks, f"{sum(m.startswith('FLAGGED') for m in marks)}/{len(marks)}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("aa", "slowdown"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--percent", type=float, default=20.0)
    parser.add_argument("--calibrate", type=Path, default=None, help="quick report whose fused medians size the wait")
    parser.add_argument("--baseline", default="all", help="baselines of the grid (default all; slowdown: fused is enough)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    console = Console(width=200)
    options = BenchOptions(baseline=args.baseline, quick=True, threads=args.threads)
    if args.what == "aa":
        aa(args.runs, options, console)
    else:
        slowdown(args.runs, args.percent, args.calibrate, options, console)


if __name__ == "__main__":
    main()
