"""The CPU kernel's x86-64 machine code runs both passes at vector width.

The kernel core is compiled once per instruction-set level and the loader picks
the widest the CPU has: x86-64-v4 (AVX-512, zmm), x86-64-v3 (AVX2, ymm) and the
baseline (SSE2, xmm); bfloat16 has one more, x86-64-v4 with AVX512-BF16 (zmm),
which its x86-64-v4 version calls where the CPU has the feature. Both built
libraries carry the core (the torch op library and the ONNX Runtime custom-op
library). For every library, dtype and version,
``objdump`` lists the kernel entry's instructions and the innermost loops that
do floating-point arithmetic (the hot loops) must

* exist for both passes: the sum of squares (no output store) and the scaled
  write (stores vectors to y); in the residual add + norm entry both passes
  store (the first writes x + residual as it sums the squares), so there it
  takes two storing loops;
* use packed arithmetic at the version's register width only (zmm, ymm, xmm);
* store their outputs at that width too. A 32-byte ``memcpy`` store compiled
  piecewise (the vector spilled to the stack frame, then copied out 16 bytes
  at a time) passed the arithmetic checks, and made the residual add + norm
  four times slower: its first pass re-reads the sum it just stored, and a
  full-width load of two half-width stores waits for both to reach the
  cache. The table counts each loop's vector moves through the stack frame
  (spills, and that pattern's first half) for the reader; a spill under
  register pressure (the SSE2 version has 16 registers) is not a failure;
* hold no scalar arithmetic (``vmulss``, ``vaddsd``, ``cvtsi2ss``...): a scalar
  instruction in a hot loop means a lane-at-a-time path.

Run as a script (``python -m tests.csrc.test_cpu_machine_code``) it prints the
per-loop table.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from env.paths import REPO_ROOT, toolchain_record_path
from tests.helpers.x86_code import Function, Loop, disassemble, objdump

pytestmark = pytest.mark.skipif(objdump() is None, reason="objdump not installed (binutils): no disassembly")

# Each kernel entry and the passes its hot loops must cover.
ENTRIES = {"clone_rows": ("sum of squares", "write"), "clone_add_rows": ("write", "write")}
# Register width of each compiled version (the symbol suffix GCC gives it).
BF16_VERSION = "x86-64-v4+avx512bf16"
VERSION_BITS = {"x86-64-v4": 512, "x86-64-v3": 256, "default": 128, BF16_VERSION: 512}
DTYPES = {"f": "float32", "d": "float64", "NS_4HalfE": "float16", "NS_8BFloat16E": "bfloat16"}
# bfloat16 alone has a version past x86-64-v4: its stores convert with AVX512-BF16
# (a function of its own, `<entry>_avx512bf16`, that the x86-64-v4 version calls).
EXPECTED = [(d, v) for d in DTYPES.values() for v in VERSION_BITS if v != BF16_VERSION or d == "bfloat16"]


def version_of(symbol: str) -> str | None:
    """'..._v3' -> 'x86-64-v3'; the plain or '.default' symbol is the baseline; the resolver is none."""
    if ".resolver" in symbol or ".cold" in symbol:
        return None
    if "_avx512bf16" in symbol:
        return BF16_VERSION
    m = re.search(r"\.arch_x86_64_(v\d)", symbol)
    return f"x86-64-{m.group(1)}" if m else "default"


def dtype_of(symbol: str) -> str:
    m = re.search(r"TypeTagI(f|d|NS_4HalfE|NS_8BFloat16E)E", symbol)
    assert m, f"no element type in {symbol}"
    return DTYPES[m.group(1)]


def libraries() -> dict[str, Path]:
    """The built libraries, found as ``ops`` finds them (without importing torch): {"torch"|"ort": path}."""
    record = toolchain_record_path()
    artifacts = json.loads(record.read_text()).get("artifacts", {}) if record.exists() else {}
    installed = sorted((REPO_ROOT / "ops").glob("_C*.so"))
    candidates = {
        "torch": os.environ.get("FUSEDBENCH_TORCH_LIBRARY")
        or (installed[0] if installed else None)
        or artifacts.get("torch_library"),
        "ort": os.environ.get("FUSEDBENCH_ORT_LIBRARY") or artifacts.get("ort_library"),
    }
    return {name: Path(path) for name, path in candidates.items() if path and Path(path).exists()}


def kernel_versions(library: Path, entry: str) -> dict[tuple[str, str], Function]:
    """{(dtype, version): entry function} of one library's kernel ``entry``.

    GCC may split a version in parts (partial inlining leaves the entry's
    first test in the version and moves the rest to ``<version>.part.0``);
    a version's parts are read as one function.
    """
    found: dict[tuple[str, str], Function] = {}
    for symbol, function in disassemble(library, entry).items():
        version = version_of(symbol)
        if version is None or not function.instructions:
            continue
        key = (dtype_of(symbol), version)
        if key in found:
            joined = sorted(found[key].instructions + function.instructions, key=lambda i: i.address)
            function = Function(found[key].name, tuple(joined))
        found[key] = function
    return found


def pass_of(loop: Loop) -> str:
    return "write" if loop.writes_output else "sum of squares"


def loop_rows(library_name: str, dtype: str, version: str, function: Function) -> list[dict]:
    rows = []
    for loop in function.innermost_loops:
        if not loop.does_fp_arithmetic:
            continue
        rows.append(
            {
                "library": library_name,
                "dtype": dtype,
                "version": version,
                "pass": pass_of(loop),
                "loop": f"{loop.start:#x}-{loop.end:#x}",
                "instructions": len(loop.instructions),
                "packed": len(loop.packed_fp),
                "widths": sorted(loop.packed_widths),
                "scalar": len(loop.scalar_fp),
                "scalar_examples": sorted({i.mnemonic for i in loop.scalar_fp})[:4],
                "store_widths": sorted(loop.store_widths),
                "frame_moves": len(loop.frame_moves),
            }
        )
    return rows


def problems(rows: list[dict], version: str, passes: tuple[str, ...] = ENTRIES["clone_rows"]) -> list[str]:
    """What is wrong with one version's hot loops, as messages; ``passes``: the loops the entry must have."""
    want = VERSION_BITS[version]
    found = []
    for r in rows:
        where = f"{r['library']} {r['dtype']} {version} {r['pass']} loop {r['loop']}"
        if r["scalar"]:
            found.append(f"{where}: {r['scalar']} scalar arithmetic instructions ({', '.join(r['scalar_examples'])})")
        if not r["packed"]:
            found.append(f"{where}: no packed arithmetic")
        elif r["widths"] != [want]:
            found.append(f"{where}: packed arithmetic at {r['widths']} bits, want {want} only")
        if r["store_widths"] and r["store_widths"] != [want]:
            found.append(f"{where}: stores at {r['store_widths']} bits, want {want} only")
    for kind in set(passes):
        if sum(r["pass"] == kind for r in rows) < passes.count(kind):
            want = f"{passes.count(kind)} {kind} loops" if passes.count(kind) > 1 else f"a {kind} loop"
            found.append(f"{rows[0]['library'] if rows else '?'} {version}: {want} expected, not found")
    return found


@pytest.fixture(scope="module")
def code() -> dict[tuple[str, str], dict[tuple[str, str], Function]]:
    """{(library, entry): {(dtype, version): function}}."""
    libs = libraries()
    if not libs:
        pytest.skip("no library built: run `invoke build` first")
    return {(name, entry): kernel_versions(path, entry) for name, path in libs.items() for entry in ENTRIES}


def test_every_library_carries_every_version_of_every_dtype(code):
    for (name, entry), versions in code.items():
        assert set(versions) == set(EXPECTED), (name, entry, sorted(versions))


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("dtype, version", EXPECTED)
def test_hot_loops_of_both_passes_are_packed_at_the_version_width(code, entry, dtype, version):
    found = []
    for (name, code_entry), versions in code.items():
        if code_entry != entry:
            continue
        function = versions[(dtype, version)]
        rows = loop_rows(name, dtype, version, function)
        where = f"{name} {entry} {dtype} {version}"
        found += problems(rows, version, ENTRIES[entry]) if rows else [f"{where}: no loop does arithmetic"]
    assert not found, "\n".join(found)


def test_loop_finder_sees_packed_and_scalar_loops():
    # A hand-written listing: an outer loop holding two inner ones, one packed
    # (ymm, stores y) and one scalar (sum of squares tail).
    from tests.helpers.x86_code import Instruction

    listing = [
        (0x10, "vmovups", "(%rdi,%rax,4),%ymm1"),
        (0x15, "vmulps", "%ymm1,%ymm1,%ymm2"),
        (0x19, "vmovups", "%ymm2,(%rsi,%rax,4)"),
        (0x1E, "jne", "10 <f+0x10>"),
        (0x20, "vmovss", "(%rdi),%xmm0"),
        (0x24, "vmulss", "%xmm0,%xmm0,%xmm0"),
        (0x28, "vaddss", "%xmm0,%xmm3,%xmm3"),
        (0x2C, "jb", "20 <f+0x20>"),
        (0x30, "jmp", "10 <f+0x10>"),
    ]
    function = Function("f", tuple(Instruction(*i) for i in listing))
    loops = function.innermost_loops
    assert [(lp.start, lp.end) for lp in loops] == [(0x10, 0x1E), (0x20, 0x2C)]
    packed, scalar = loops
    assert packed.packed_widths == {256} and not packed.scalar_fp and packed.writes_output
    assert len(scalar.scalar_fp) == 2 and not scalar.packed_fp and not scalar.writes_output
    where = "t float32 x86-64-v3 sum of squares loop 0x20-0x2c"
    assert problems(loop_rows("t", "float32", "x86-64-v3", function), "x86-64-v3") == [
        f"{where}: 2 scalar arithmetic instructions (vaddss, vmulss)",
        f"{where}: no packed arithmetic",
    ]
    assert problems(loop_rows("t", "float32", "x86-64-v4", function), "x86-64-v4")[0].endswith(
        "packed arithmetic at [256] bits, want 512 only"
    )


def test_a_jump_back_to_a_shared_tail_is_no_loop():
    # GCC's layout: a cold path (sqrtf's slow path, its vdivss) sits between a
    # shared tail and a jump back to it, and the tail leaves by an unconditional
    # jump. The span from the tail to the jump is no loop: control cannot flow
    # from its start to its end inside it. The real loop after it still counts.
    from tests.helpers.x86_code import Instruction

    listing = [
        (0x10, "call", "100 <memcpy@plt>"),
        (0x15, "jmp", "200 <f+0x200>"),
        (0x1A, "call", "110 <sqrtf@plt>"),
        (0x1F, "vdivss", "%xmm0,%xmm4,%xmm0"),
        (0x23, "jne", "300 <f+0x300>"),
        (0x25, "vzeroupper", ""),
        (0x28, "jmp", "10 <f+0x10>"),
        (0x30, "vmulps", "(%rdi,%rax,4),%ymm0,%ymm1"),
        (0x35, "vmovups", "%ymm1,(%rsi,%rax,4)"),
        (0x3A, "jne", "30 <f+0x30>"),
    ]
    function = Function("f", tuple(Instruction(*i) for i in listing))
    assert [(lp.start, lp.end) for lp in function.innermost_loops] == [(0x30, 0x3A)]


def test_a_store_split_through_the_stack_frame_is_found():
    # The write loop of a 32-byte memcpy store under generic tuning: the
    # vector spilled to the frame, then copied out 16 bytes at a time.
    from tests.helpers.x86_code import Instruction

    listing = [
        (0x00, "push", "%rbp"),
        (0x01, "mov", "%rsp,%rbp"),
        (0x10, "vmovups", "(%rdi,%rax,4),%ymm1"),
        (0x15, "vmulps", "%ymm1,%ymm1,%ymm2"),
        (0x19, "vmovaps", "%ymm2,-0xb0(%rbp)"),
        (0x21, "vmovdqa", "(%r15),%xmm7"),
        (0x25, "vmovdqu", "%xmm7,(%rsi,%rax,4)"),
        (0x2A, "vmovdqa", "0x10(%r15),%xmm7"),
        (0x2F, "vmovdqu", "%xmm7,0x10(%rsi,%rax,4)"),
        (0x34, "jne", "10 <f+0x10>"),
    ]
    function = Function("f", tuple(Instruction(*i) for i in listing))
    (loop,) = function.innermost_loops
    assert loop.writes_output and loop.store_widths == {128} and len(loop.frame_moves) == 1
    where = "t float32 x86-64-v3 write loop 0x10-0x34"
    assert problems(loop_rows("t", "float32", "x86-64-v3", function), "x86-64-v3", ("write",)) == [
        f"{where}: stores at [128] bits, want 256 only"
    ]
    # The same loop storing straight from the register passes.
    direct = [*listing[:4], (0x19, "vmovups", "%ymm2,(%rsi,%rax,4)"), (0x34, "jne", "10 <f+0x10>")]
    function = Function("f", tuple(Instruction(*i) for i in direct))
    assert problems(loop_rows("t", "float32", "x86-64-v3", function), "x86-64-v3", ("write",)) == []


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="CPU kernel hot loops (innermost loops doing floating-point arithmetic)")
    columns = ("library", "dtype", "version", "pass", "loop", "insts", "packed", "widths", "stores", "frame", "scalar")
    for col in (*columns, "verdict"):
        table.add_column(col)
    for name, path in libraries().items():
        for entry, passes in ENTRIES.items():
            for (dtype, version), function in sorted(kernel_versions(path, entry).items()):
                rows = loop_rows(f"{name} {entry}", dtype, version, function)
                bad = set(problems(rows, version, passes))
                for r in rows:
                    verdict = "ok" if not any(r["loop"] in b for b in bad) else "FAIL"
                    table.add_row(
                        r["library"],
                        dtype,
                        version,
                        r["pass"],
                        r["loop"],
                        str(r["instructions"]),
                        str(r["packed"]),
                        ",".join(map(str, r["widths"])),
                        ",".join(map(str, r["store_widths"])),
                        str(r["frame_moves"]),
                        str(r["scalar"]),
                        verdict,
                    )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
