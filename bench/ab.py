"""``invoke bench --against REF``: this checkout and REF, built apart, measured interleaved in one run.

Reports from two machines measure the machines; so do two runs on one machine
minutes apart, when its neighbours or its page-fault costs drift. The answer
(asv's ``continuous``) is to measure both builds in one run, taking turns:

  1. REF is resolved to a commit and checked out into ``<build>/ab/<sha>/src``:
     a ``git clone --shared`` (objects borrowed from this repository, nothing
     written into it - unlike ``git worktree add``, which registers the tree in
     this repository and leaves a stale entry when a run is interrupted). It is
     cloned to a temporary name and renamed, so a half clone is never reused.
  2. REF is built there by its own ``invoke build`` (its own tasks and code, as
     of REF) into ``<build>/ab/<sha>/build`` (FUSEDBENCH_BUILD_DIR), so neither
     build can touch the other's files. This checkout was built by the task.
  3. One worker process per build (bench/ab_worker.py, run from that build's
     tree, importing its code and loading its libraries: two builds of one
     extension cannot share a process) is started and plans the same grid.
     The parent then drives them over pipes round by round, alternating which
     goes first (NEW BASE, BASE NEW, ...), so drift hits both builds equally;
     the worker not measuring waits on its pipe and uses no CPU. Persistent
     workers rather than a process per round: each build's setup (inputs,
     exports, compiles, allocator warm-up) happens once, as in a plain run,
     instead of once per round.
  4. Each worker writes its report; the parent compares them with
     ``invoke compare``'s code, prints the table, saves it as ``compare.txt``
     beside the reports and returns compare's exit code.

When REF cannot take part - it predates this A/B support (no
bench/ab_worker.py), its worker speaks another protocol, or it writes another
report schema - the run is skipped with the reason (exit 0): its numbers could
not be compared with this checkout's anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from bench import compare
from bench.ab_worker import PROTOCOL
from bench.report import SCHEMA_VERSION
from bench.run import BenchOptions, reports_dir
from env.files import write_text_atomic
from env.paths import REPO_ROOT, build_dir
from env.repo import git_commit

# Exit code when the A/B run could not be set up (bad ref, REF failed to build, a worker died).
EXIT_SETUP_FAILED = 4
# More, shorter rounds than a plain run (same total budget per variant): each build's rounds
# then sit closer in time to the other's, and each build gets more chances at a quiet round.
AB_ROUNDS = 6
WORKER = "bench/ab_worker.py"
# Variables that point a process at one build's outputs: each side gets its own.
_BUILD_VARIABLES = ("FUSEDBENCH_BUILD_DIR", "FUSEDBENCH_TORCH_LIBRARY", "FUSEDBENCH_ORT_LIBRARY", "PYTHONPATH")


class AbError(RuntimeError):
    """The A/B run could not be set up or a worker failed; the message says what to do."""


class Skipped(Exception):
    """REF cannot take part in an A/B run (the message says why)."""


@dataclass(frozen=True)
class Tree:
    """A source tree and the build folder its libraries are in (None: whatever its own environment says)."""

    root: Path
    build: Path | None = None


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise AbError(f"`git {' '.join(args)}` in {cwd} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def resolve(ref: str, repo: Path = REPO_ROOT) -> str:
    """REF -> the full hash of the commit it names (clear error for anything else)."""
    if not ref or ref.startswith("-"):
        raise AbError(f"--against must name a commit (a branch, tag, hash, HEAD~1, ...), got {ref!r}")
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo)
    except AbError:
        raise AbError(f"--against {ref!r} is not a commit of {repo} - check the name, or `git fetch` it first") from None


def checkout(sha: str, root: Path, repo: Path = REPO_ROOT) -> Path:
    """REF's source tree at ``root/src``: reused when it is that commit, untouched; else cloned afresh."""
    src = root / "src"
    if src.is_dir():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=src, capture_output=True, text=True)
        if head == sha and dirty.returncode == 0 and not dirty.stdout.strip():
            return src
        shutil.rmtree(src)
    partial = root / "src.partial"
    shutil.rmtree(partial, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    _git("clone", "--quiet", "--shared", "--no-checkout", str(repo), str(partial))
    _git("checkout", "--quiet", "--detach", sha, cwd=partial)
    partial.rename(src)
    return src


def _side_env(build: Path | None) -> dict[str, str]:
    """The environment of a process working on one side's tree.

    With ``build``, only that build is visible (no library or build folder of the
    caller's leaks in); without, the caller's environment as it is (this checkout,
    run as a plain `invoke bench` would run).
    """
    env = dict(os.environ)
    if build is not None:
        env = {k: v for k, v in env.items() if k not in _BUILD_VARIABLES}
        env["FUSEDBENCH_BUILD_DIR"] = str(build)
    return env


def build_ref(src: Path, build: Path, log: Path, console: Console) -> None:
    """REF's own `invoke build`, into its own build folder; its output goes to ``log``."""
    console.print(f"building BASE in {src} (its own `invoke build`, into {build}; log {log})", highlight=False)
    started = time.perf_counter()
    with open(log, "w") as out:
        result = subprocess.run([sys.executable, "-m", "invoke", "build"], cwd=src, env=_side_env(build), stdout=out, stderr=subprocess.STDOUT)
    if result.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise AbError(f"building REF failed (exit {result.returncode}); last lines of {log}:\n{tail}")
    console.print(f"BASE built in {time.perf_counter() - started:.0f} s", highlight=False)


class Worker:
    """One build's worker process (bench/ab_worker.py), driven request by request."""

    def __init__(self, label: str, tree: Path, build: Path | None, log: Path) -> None:
        self.label, self.log = label, log
        self._log_file = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.ab_worker"], cwd=tree, env=_side_env(build),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_file, text=True,
        )
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            tail = "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-15:])
            raise AbError(f"the {self.label} worker exited (code {self.process.returncode}); last lines of {self.log}:\n{tail}")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise AbError(f"the {self.label} worker answered {line.strip()[:200]!r}, not a JSON line (its log: {self.log})") from None

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise AbError(f"the {self.label} worker failed on {request['do']!r}: {reply['error']} (traceback in {self.log})")
        return reply

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"do": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log_file.close()


def check_compatible(hello: dict, sha: str) -> None:
    """Raise Skipped when REF's worker cannot be driven or its report could not be compared."""
    if hello.get("protocol") != PROTOCOL:
        raise Skipped(f"REF {sha[:12]}'s A/B worker speaks protocol {hello.get('protocol')}, this checkout {PROTOCOL}")
    if hello.get("schema_version") != SCHEMA_VERSION:
        raise Skipped(
            f"REF {sha[:12]} writes report schema {hello.get('schema_version')}, this checkout reads {SCHEMA_VERSION}: "
            "its rows have other columns, so the two reports cannot be compared"
        )


@dataclass(frozen=True)
class AbResult:
    code: int
    folder: Path | None = None
    new_csv: Path | None = None
    base_csv: Path | None = None
    skipped: str = ""


def run_ab(
    ref: str, options: BenchOptions, console: Console, threshold: float = 0.10, alpha: float = 0.002, new: Tree | None = None
) -> AbResult:
    """Build REF beside NEW (default: this checkout, already built), measure both interleaved, compare.

    ``options.rounds`` is raised to AB_ROUNDS; see the module docstring for the rest.
    """
    new = new or Tree(REPO_ROOT)
    options = replace(options, rounds=max(options.rounds, AB_ROUNDS))
    sha = resolve(ref, new.root)
    root = (new.build or build_dir()) / "ab" / sha
    src = checkout(sha, root, new.root)
    new_commit = git_commit(new.root)
    console.print(f"[bold]A/B[/]: NEW = {new.root} ({new_commit}), BASE = {ref} ({sha})", highlight=False)
    folder = reports_dir(options.out_dir) / "ab" / f"{_timestamp()}-{new_commit[:12]}-vs-{sha[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    if not (src / WORKER).is_file():
        return _skip(f"REF {sha[:12]} predates A/B runs (it has no {WORKER})", console, folder)
    workers: list[Worker] = []
    try:
        # REF's worker says who it is before anything is built (it loads no library until 'plan').
        base = Worker("BASE", src, root / "build", folder / "base.log")
        workers.append(base)
        try:
            check_compatible(base.hello, sha)
        except Skipped as reason:
            return _skip(str(reason), console, folder)
        build_ref(src, root / "build", root / "build.log", console)
        new_worker = Worker("NEW", new.root, new.build, folder / "new.log")
        workers.insert(0, new_worker)
        plan = {k: v for k, v in asdict(options).items() if k != "out_dir"}
        for worker in workers:
            worker.ask({"do": "plan", "options": plan})
        rounds = options.rounds
        for index in range(rounds):
            order = (new_worker, base) if index % 2 == 0 else (base, new_worker)
            seconds = {w.label: w.ask({"do": "round", "index": index})["seconds"] for w in order}
            console.print(f"round {index + 1}/{rounds}: " + ", ".join(f"{label} {s:.0f} s" for label, s in seconds.items()), highlight=False)
        records = {w.label: w.ask({"do": "record", "out_dir": str(folder / w.label.lower())}) for w in workers}
    finally:
        for worker in workers:
            worker.close()
    return _compare(records, folder, console, threshold, alpha)


def _compare(records: dict[str, dict], folder: Path, console: Console, threshold: float, alpha: float) -> AbResult:
    for label, record in records.items():
        for line in record["skipped"]:
            console.print(f"[yellow]{label} skipped[/] {line}", highlight=False)
        for line in record["failures"]:
            console.print(f"[red bold]{label} FAILED[/] {line}", highlight=False)
    if records["NEW"]["csv"] is None or records["BASE"]["csv"] is None:
        raise AbError(f"a side measured nothing (see {folder}/new.log and base.log)")
    new_csv, base_csv = Path(records["NEW"]["csv"]), Path(records["BASE"]["csv"])
    # Printed as usual and recorded, to save the same table.
    recorder = Console(record=True, file=console.file, width=console.width, force_terminal=console.is_terminal)
    code = compare.main(str(base_csv), str(new_csv), threshold=threshold, alpha=alpha, console=recorder)
    text = recorder.export_text()
    saved = write_text_atomic(folder / "compare.txt", f"BASE {base_csv}\nNEW  {new_csv}\n\n{text}")
    console.print(f"reports  BASE {base_csv}\n         NEW  {new_csv}\ncompare  {saved}", highlight=False)
    if records["NEW"]["failures"] and code == compare.EXIT_OK:
        code = compare.EXIT_REGRESSION  # a wrong output is a failure, as in a plain run
    return AbResult(code, folder, new_csv, base_csv)


def _skip(reason: str, console: Console, folder: Path | None = None) -> AbResult:
    console.print(f"[yellow bold]A/B skipped[/]: {reason}; nothing was compared", highlight=False)
    if folder is not None:
        write_text_atomic(folder / "compare.txt", f"A/B skipped: {reason}\n")
    return AbResult(compare.EXIT_OK, folder=folder, skipped=reason)


def _timestamp() -> str:
    from bench.environment import utc_timestamp

    return utc_timestamp()


def main(ref: str, options: BenchOptions) -> int:
    """Run the A/B comparison, print the table; return compare's exit code (EXIT_SETUP_FAILED on a setup error)."""
    console = Console(width=None if Console().is_terminal else 200)
    try:
        return run_ab(ref, options, console).code
    except AbError as error:
        console.print(f"[red bold]bench --against: {error}[/]", highlight=False)
        return EXIT_SETUP_FAILED
