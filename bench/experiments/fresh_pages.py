"""What a large fresh allocation costs to touch, against how long the memory lay free before it.

    python -m bench.experiments.fresh_pages [--mib 1280] [--hold 1] [--gaps 0,0.5,1,2,4,8] [--repeats 6] [--out DIR]

A VM whose balloon device reports free pages (virtio-balloon's free page
reporting: the guest hands free blocks of 2^page_reporting_order pages back to
the host a couple of seconds after they are freed) pays twice for memory that
lay free long enough to be reported: the guest's page fault, and the host's
fault that backs the page again. Its allocating rows then read slower or
faster with how long the memory rested, not with the code. This tool allocates
``--hold`` buffers of ``--mib`` MiB each (one mapping each: glibc maps anything
this large on its own) and writes every page, frees them, waits ``--gaps``
seconds and does it again, ``--repeats`` rounds a gap in an interleaved order,
and records each touch's time and page faults. With ``--hold 1`` the same
memory comes back each round (the kernel hands out what was freed last); with
more, a round reaches memory that lay free for longer. The machine's reporting
setting is read, not changed.

Written under --out: ``fresh_pages.csv`` (one line per touch: `gap_s`, `repeat`, `chunk`, `seconds`,
`minor_faults`, `us_per_fault`) and ``fresh_pages.md`` (per gap: the time per fault's median and range, and the
median over rounds of a round's slowest chunk).
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from pathlib import Path

REPORTING_ORDER = Path("/sys/module/page_reporting/parameters/page_reporting_order")
BALLOON_DRIVER = Path("/sys/bus/virtio/drivers/virtio_balloon")
# Bit 5 of a virtio-balloon device's feature bits: VIRTIO_BALLOON_F_REPORTING (free page reporting).
REPORTING_FEATURE_BIT = 5


def reporting_state() -> str:
    """The balloon's free page reporting as this machine has it: a line (read only)."""
    devices = sorted(BALLOON_DRIVER.glob("virtio*")) if BALLOON_DRIVER.is_dir() else []
    if not devices:
        return "no virtio-balloon device: no free page reporting"
    features = (devices[0] / "features").read_text().strip()
    on = len(features) > REPORTING_FEATURE_BIT and features[REPORTING_FEATURE_BIT] == "1"
    order = int(REPORTING_ORDER.read_text()) if REPORTING_ORDER.is_file() else None
    reported = "" if order is None else f"order {order} ({2**order * 4} KiB blocks)"
    return f"virtio-balloon free page reporting {'on' if on else 'off'}" + (f", {reported}" if on and reported else "")


def touch(mib: int):
    """Allocate ``mib`` MiB and write every page once: (the buffer, seconds, minor faults) of the allocation and
    writes."""
    import torch

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    began = time.perf_counter()
    buffer = torch.empty(mib * (1 << 20), dtype=torch.uint8)
    buffer.fill_(1)  # every byte written: every page faulted in
    seconds = time.perf_counter() - began
    return buffer, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def run(mib: int, hold: int, gaps: list[float], repeats: int, seed: int = 0) -> list[dict]:
    """``repeats`` rounds a gap, the gaps interleaved; a round touches ``hold`` allocations of ``mib`` MiB held
    together (``hold`` 1: the same memory comes back each round), frees them all, then waits its gap."""
    import torch

    torch.set_num_threads(1)  # one thread: the faults are taken one after another, as an op's single thread does
    order = [gap for gap in gaps for _ in range(repeats)]
    random.Random(seed).shuffle(order)  # interleaved: a drift of the host over the run spreads over every gap
    rows, seen = [], dict.fromkeys(gaps, 0)
    for gap in order:
        time.sleep(gap)
        held = []
        for chunk in range(hold):
            buffer, seconds, faults = touch(mib)
            held.append(buffer)
            rows.append(
                {
                    "gap_s": gap,
                    "repeat": seen[gap],
                    "chunk": chunk,
                    "seconds": seconds,
                    "minor_faults": faults,
                    "us_per_fault": seconds / faults * 1e6 if faults else float("nan"),
                }
            )
        del held, buffer
        seen[gap] += 1
    return rows


def report(rows: list[dict], out: Path, state: str, mib: int, hold: int) -> str:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "fresh_pages.csv", index=False)
    lines = [
        f"{hold} allocation(s) of {mib} MiB held together, written, freed, after each gap; {state}",
        "",
        "| gap before the round (s) | touches | µs per fault, median | min | max | slowest chunk of a round, median |",
        "|---|---|---|---|---|---|",
    ]
    for gap, group in frame.groupby("gap_s"):
        per = group.us_per_fault
        slowest = group.groupby("repeat").us_per_fault.max().median()
        lines.append(
            f"| {gap:g} | {len(group)} | {per.median():.2f} | {per.min():.2f} | {per.max():.2f} | {slowest:.2f} |"
        )
    text = "\n".join(lines)
    (out / "fresh_pages.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1280, help="the allocation (1280: unfused add + norm's per call)")
    parser.add_argument("--gaps", default="0,0.5,1,2,4,8", help="seconds between a free and the next allocation")
    parser.add_argument("--hold", type=int, default=1, help="allocations held at once in a round (1: recycled)")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("reports/fresh_pages"))
    args = parser.parse_args(argv)
    gaps = [float(g) for g in args.gaps.split(",") if g.strip()]
    if min(args.mib, args.hold, args.repeats) < 1 or not gaps or min(gaps) < 0:
        parser.error("--mib, --hold and --repeats must be >= 1 and --gaps a list of seconds >= 0")
    from bench.measure.allocator import DEFAULT, set_malloc_policy

    set_malloc_policy(DEFAULT)  # as a worker: glibc maps an allocation this large on its own either way
    state = reporting_state()
    print(report(run(args.mib, args.hold, gaps, args.repeats), args.out, state, args.mib, args.hold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
