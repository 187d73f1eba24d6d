"""``invoke bench.gate``: CI's regression gate, the quick A/B run against the last landed commit.

A submission lands many commits at once, so the commit before HEAD is not the
base: the base is the last commit that landed (passed CI on main). It is found as
  1. the tag LANDED_TAG, when the clone has it: a project's CI moves it to main's
     HEAD after each green run there (``git tag -f fusedbench/landed && git push
     -f origin fusedbench/landed``);
  2. else the commit in BASE_FILE (tracked; ``invoke bench.set-base`` writes it),
     which must be an ancestor of HEAD.
The quick grid of HEAD is measured against that base (bench/ab/driver.py) at the
default threshold, both sides by HEAD's bench code: the base's side imports the
base's ``ops`` package and loads the libraries built from the base's sources, so
a change of the harness (sampling, timing loop, allocator policy) moves no row.
A base whose ops lack what HEAD's harness calls is measured by its own harness,
as the run says. A REGRESSION fails the gate, unless a commit between the base
and HEAD accepts it on purpose with a trailer in its message,

    Accept-Regression: <row glob>: <reason>

whose glob matches the row's name (``baseline/variant workload shape dtype
device``, then the layout where it is not the natural one, e.g. ``fused/call op
8x128x1024 float32 cpu`` or ``fused/call op 8x128x1024 float32 cpu
page_offset``; ``fused/* op *`` matches every fused op row). Accepted rows are listed with their reason and do
not fail it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bench.ab import scratch
from bench.measure.placement import NATURAL
from bench.stats import compare
from env.paths import REPO_ROOT

LANDED_TAG = "fusedbench/landed"
BASE_FILE = Path(".ci") / "base"
TRAILER = "Accept-Regression"
EXIT_NO_BASE = 4  # as an A/B run that cannot be set up


class GateError(RuntimeError):
    """No base to gate against (the message says how to set one)."""


@dataclass(frozen=True)
class Base:
    sha: str
    source: str  # where it was found: the tag or the file


@dataclass(frozen=True)
class Acceptance:
    glob: str
    reason: str
    commit: str


def _commit(ref: str, repo: Path) -> str | None:
    try:
        return scratch.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo)
    except scratch.ScratchError:
        return None


def find_base(repo: Path = REPO_ROOT) -> Base:
    """The last landed commit: LANDED_TAG if present, else BASE_FILE's commit, checked to be an ancestor of HEAD."""
    if sha := _commit(f"refs/tags/{LANDED_TAG}", repo):
        source = f"tag {LANDED_TAG}"
    else:
        path = repo / BASE_FILE
        if not path.is_file():
            raise GateError(
                f"no base to gate against: neither the tag {LANDED_TAG} nor {BASE_FILE} - "
                f"run `invoke bench.set-base` on the last landed commit and commit {BASE_FILE}"
            )
        written = path.read_text().strip()
        sha = _commit(written, repo)
        if sha is None:
            raise GateError(f"{BASE_FILE} names {written!r}, not a commit of this clone (a shallow clone? fetch it)")
        source = str(BASE_FILE)
    try:
        scratch.git("merge-base", "--is-ancestor", sha, "HEAD", cwd=repo)
    except scratch.ScratchError:
        raise GateError(
            f"the base {sha[:12]} ({source}) is not an ancestor of HEAD: move it to a landed commit"
        ) from None
    return Base(sha, source)


def acceptances(base: str, repo: Path = REPO_ROOT) -> list[Acceptance]:
    """The Accept-Regression trailers of the commits after ``base`` up to HEAD."""
    log = scratch.git(
        "log", f"--format=%H%x1f%(trailers:key={TRAILER},valueonly,separator=%x1f)%x1e", f"{base}..HEAD", cwd=repo
    )
    found = []
    for record in filter(None, (r.strip() for r in log.split("\x1e"))):
        commit, *values = record.split("\x1f")
        for value in filter(None, (v.strip() for v in values)):
            glob, separator, reason = value.partition(": ")
            if not separator or not reason.strip():
                raise GateError(f"commit {commit[:12]}: `{TRAILER}: {value}` needs `<row glob>: <reason>`")
            found.append(Acceptance(glob.strip(), reason.strip(), commit))
    return found


def row_name(key: compare.Key) -> str:
    """A row as the trailer's glob reads it: baseline/variant workload shape dtype device [layout]."""
    workload, shape, dtype, baseline, variant, device, layout = key
    # The natural layout is named by nothing, so a glob written before the layout column still reads its rows.
    where = "" if layout == NATURAL else f" {layout}"
    return f"{baseline}/{variant} {workload} {shape} {dtype} {device}{where}"


@dataclass(frozen=True)
class Decision:
    code: int
    accepted: list[tuple[str, Acceptance]]  # (row, the trailer accepting it)
    failing: list[str]  # rows that regressed and no trailer accepts


def decide(comparison: compare.Comparison, code: int, accepted: list[Acceptance]) -> Decision:
    """The gate's exit code: the A/B run's, with its regressions that a trailer accepts no longer failing it."""
    pairs, failing = [], []
    for row in comparison.regressions:
        name = row_name(row.key)
        match = next((a for a in accepted if fnmatch.fnmatchcase(name, a.glob)), None)
        if match:
            pairs.append((name, match))
        else:
            failing.append(name)
    if code == compare.EXIT_REGRESSION and not failing and pairs:
        code = compare.EXIT_OK
    return Decision(code, pairs, failing)


def report(decision: Decision, console: Console) -> None:
    for name, acceptance in decision.accepted:
        console.print(
            f"[yellow]accepted regression[/] {name}: {acceptance.reason} ({TRAILER} in {acceptance.commit[:12]})",
            highlight=False,
        )
    if decision.failing:
        console.print(
            f"[red bold]gate: {len(decision.failing)} regression(s)[/]: {'; '.join(decision.failing)}. To accept one "
            f"on purpose, add a trailer to a commit's message: `{TRAILER}: <row glob>: <reason>`",
            highlight=False,
        )


def write_base(sha: str, repo: Path = REPO_ROOT) -> Path:
    """BASE_FILE holding ``sha``'s full hash (it must be a commit of this repository)."""
    full = _commit(sha, repo)
    if full is None:
        raise GateError(f"{sha!r} is not a commit of {repo}")
    path = repo / BASE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(full + "\n")
    return path


def run_gate(
    console: Console,
    threshold: float = compare.DEFAULT_THRESHOLD,
    options=None,
    repo: Path = REPO_ROOT,
    new=None,
    processes: int | None = None,
) -> int:
    """Find the base, measure HEAD (``new``: its built tree, default this checkout) against it, decide; the exit
    code. ``options``: the grid (default the quick one)."""
    from bench.ab import driver as ab
    from bench.plan.options import BenchOptions

    try:
        base = find_base(repo)
        head = scratch.git("rev-parse", "HEAD", cwd=repo)
        accepted = acceptances(base.sha, repo) if base.sha != head else []
    except GateError as error:
        console.print(f"[red bold]bench.gate: {error}[/]", highlight=False)
        return EXIT_NO_BASE
    if base.sha == head:
        console.print(f"gate: HEAD is the base ({base.source}): nothing new to gate", highlight=False)
        return compare.EXIT_OK
    console.print(f"gate: HEAD {head[:12]} against the base {base.sha[:12]} ({base.source})", highlight=False)
    try:
        result = ab.run_ab(
            base.sha,
            options or BenchOptions(quick=True),
            console,
            threshold=threshold,
            new=new or ab.Tree(repo),
            processes=processes,
            harness=ab.HARNESS_HEAD,  # the gate judges the op's code, not the ruler: HEAD's bench measures both
        )
    except ab.AbError as error:
        console.print(f"[red bold]bench.gate: {error}[/]", highlight=False)
        return ab.EXIT_SETUP_FAILED
    if result.comparison is None:  # skipped: nothing compared
        return result.code
    decision = decide(result.comparison, result.code, accepted)
    report(decision, console)
    return decision.code


def main(threshold: float = compare.DEFAULT_THRESHOLD, out_dir: str | None = None) -> int:
    from bench.plan.options import BenchOptions

    console = Console(width=None if Console().is_terminal else 200)
    return run_gate(console, threshold, BenchOptions(quick=True, out_dir=out_dir))
