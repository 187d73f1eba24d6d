"""fusedbench tasks (``invoke --list``). Each task calls one module function; no logic here."""

from __future__ import annotations

import sys

from invoke import Collection, Exit, task


@task(help={"aot": "ahead-of-time build with setup.py (delivery) instead of the JIT build (default)"})
def build(c, aot=False):
    """Record the toolchain, then build the torch op library and the ONNX Runtime custom-op library."""
    from env.build import build as run_build
    from env.torch_build import BuildError

    try:
        run_build("aot" if aot else "jit")
    except BuildError as error:
        raise Exit(f"build failed - {error}") from error


@task
def toolchain(c):
    """Print the toolchain table of the last build (build/toolchain.json)."""
    from env import toolchain as tc
    from env.paths import toolchain_record_path

    if not toolchain_record_path().exists():
        raise Exit(f"no toolchain record at {toolchain_record_path()} - run `invoke build` first")
    print(tc.format_summary(tc.read_record()))


@task(
    pre=[build],
    help={
        "k": "only tests matching this pytest -k expression",
        "args": "extra pytest arguments, quoted",
    },
)
def test(c, k="", args=""):
    """Build, then run the test suite (pytest)."""
    command = [sys.executable, "-m", "pytest"]
    if k:
        command += ["-k", k]
    c.run(" ".join(_quote(a) for a in command) + (f" {args}" if args else ""), pty=False)


@task(name="check")
def env_check(c):
    """Compare the installed environment with environment.lock.yml; fail on any drift."""
    from env.lock import drift, read_lock

    lock = read_lock()
    lines = drift(lock)
    if lines:
        listed = "\n".join(f"  {line}" for line in lines)
        raise Exit(f"environment drifts from {lock.path.name}:\n{listed}\n- run scripts/create_env.sh to re-sync")
    print(f"environment matches {lock.path.name}: python {lock.python}, {len(lock.pins)} pinned packages")


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# --- namespace: one add_task line per task ---------------------------------
env_namespace = Collection("env")
env_namespace.add_task(env_check)

ns = Collection()
ns.add_task(build)
ns.add_task(toolchain)
ns.add_task(test)
ns.add_collection(env_namespace)
