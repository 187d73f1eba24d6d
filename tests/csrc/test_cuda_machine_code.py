"""The CUDA kernels' sm_90 machine code does what the source intends.

No GPU needed: nvcc compiles csrc/core/fused_norm_cuda.cu for sm_90 (the
compile check's flags), cuobjdump lists the SASS, ptxas reports registers and
spills. For every kernel variant:

* register kernels (warp_rows, block_rows): every x load of a row is issued
  before any instruction waits on a loaded value, i.e. one dependent memory
  round per row (a second round doubles the latency a row costs);
* each row is a scalar head, a vector body and a scalar tail: the body's
  loads and stores of x and y, and weight's and bias's loads where they are
  at x's phase, are as wide as the variant's vector (LDG.E.EF.128 /
  STG.E.EF.128 / LDG.E.128.CONSTANT on the 16-byte path), one per chunk in
  the register kernels; every narrower access is one element wide (the
  row's edge element, and weight and bias off x's phase), never a split
  vector;
* no spills, and enough resident blocks per SM at the planned block size to
  keep the bytes in flight that HBM3e's latency needs.

The residual add + norm's kernels (add_warp_rows_kernel, ...) are held to the
same: their x and residual loads are x's (one round, vector-wide in the body,
one element at the edge), their residual_out and y stores y's.

Run as a script (``python -m tests.csrc.test_cuda_machine_code``) it prints
the per-variant table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from env.builder import cuda as cuda_build
from env.builder.toolkit import find_cuda_toolkit
from tests.helpers.cuda_variants import build_probe, plans
from tests.helpers.sass import Instruction, KernelCode, blocks_per_sm, count_load_rounds, disassemble, nvidia_tool

CUOBJDUMP = nvidia_tool("cuobjdump")

pytestmark = [
    pytest.mark.skipif(find_cuda_toolkit() is None, reason="nvcc not found: the sm_90 machine code cannot be built"),
    pytest.mark.skipif(
        CUOBJDUMP is None,
        reason="cuobjdump not installed (pip package nvidia-cuda-cuobjdump, pinned in the lock): SASS cannot be read",
    ),
]

ELEMENT_BYTES = {"float": 4, "double": 8, "Half": 2, "BFloat16": 2}

# Occupancy targets on sm_90 (blocks per SM at the planned block size).
# block_rows at 256 threads (4096 x 8192 bf16): >= 5 blocks, 1280 threads x
# 64 bytes of x in flight each = 80 KB per SM, about 40% more than 4 blocks
# (H200's HBM3e needs that much more in flight than an H100 to hide its
# latency). warp_rows (128 threads): >= 8 blocks, 1024 threads. The two-pass
# kernel: >= 2 blocks, so one block's loads run while another waits at its
# row's barrier.
MIN_BLOCKS = {"warp_rows_kernel": 8, "block_rows_kernel": 5, "streaming_rows_kernel": 2}
# The add + norm's register kernels hold two vectors per chunk (fused_norm_cuda_plan.h): add block_rows (vectors)
# at 4 blocks of 256 threads x 128 bytes = 128 KB in flight per SM, its warp_rows of 4 chunks of 16-byte vectors at
# 6 blocks of 128 threads x 128 bytes = 96 KB; both more than the targets above.
ADD_MIN_BLOCKS = {"add_block_rows_kernel": 4, "add_warp_rows_kernel": 6}


# The add's block_rows with 16-byte float and float64 vectors: ptxas adds chunk 0's x and residual before it issues
# the loads of the later chunks (the register of chunk 0's residual reused for chunk 1's), whatever the register
# cap (tried 48 to 80) and the order of the loads; two rounds per row instead of one. Listed exactly, so that a
# change in either direction shows.
ADD_TWO_ROUNDS = {"add_block_rows_kernel<float, 4, 4>", "add_block_rows_kernel<double, 2, 4>"}


def is_add(kernel: str) -> bool:
    """Whether a kernel family is the residual add + norm's ('add_warp_rows_kernel')."""
    return kernel.startswith("add_")


def family(kernel: str) -> str:
    """The launch plan's name of a kernel family: 'add_block_rows_kernel' -> 'block_rows_kernel'."""
    return kernel.removeprefix("add_")


def chunks_of(name: str) -> int:
    """Chunks of a register kernel: 'warp_rows_kernel<float, 4, 2>' -> 2."""
    return int(name.rstrip(">").rsplit(", ", 1)[1])


def min_blocks(name: str) -> int:
    """Resident blocks per SM a variant must reach at its planned block size."""
    kernel, element, vec = variant_of(name)
    if kernel == "add_block_rows_kernel" and vec > 1:
        return ADD_MIN_BLOCKS[kernel]
    if kernel == "add_warp_rows_kernel" and vec * ELEMENT_BYTES[element] == 16 and chunks_of(name) == 4:
        return ADD_MIN_BLOCKS[kernel]
    return MIN_BLOCKS[family(kernel)]


def variant_of(name: str) -> tuple[str, str, int]:
    """'block_rows_kernel<BFloat16, 8, 4>' -> ('block_rows_kernel', 'BFloat16', 8)."""
    m = re.fullmatch(r"(\w+)<(\w+), (\d+)(?:, \d+)?>", name)
    assert m, f"unexpected kernel name {name}"
    return m.group(1), m.group(2), int(m.group(3))


@pytest.fixture(scope="module")
def machine_code(tmp_path_factory) -> tuple[dict[str, KernelCode], dict[str, dict]]:
    """({kernel: SASS}, {kernel: ptxas resources}) for sm_90."""
    out = tmp_path_factory.mktemp("sm90")
    check = cuda_build.compile_check(out, arch_list="9.0", adapters=False)
    (obj,) = [Path(o["path"]) for o in check.report["objects"] if o["target"] == "sm_90"]
    resources = {k["kernel"]: k for k in check.report["kernels"] if k["arch"] == "sm_90"}
    return disassemble(obj, CUOBJDUMP), resources


@pytest.fixture(scope="module")
def planned_threads(tmp_path_factory) -> dict[str, int]:
    """Block size the launch plan picks per kernel, at the shapes the targets are stated for."""
    probe = build_probe(tmp_path_factory.mktemp("probe"))
    cases = [(4096, 512, 2, 16), (4096, 8192, 2, 16), (16, 1 << 20, 2, 16)]
    return {p["kernel"]: p["threads"] for p in plans(probe, cases)}


def test_every_variant_is_disassembled(machine_code):
    sass, resources = machine_code
    assert set(sass) == set(resources) and sass
    for name, code in sass.items():
        assert code.global_accesses, f"{name}: no global load or store found (listing format changed?)"


def test_register_kernels_issue_all_x_loads_of_a_row_at_once(machine_code):
    sass, _ = machine_code
    # The add's x and residual loads are both evict-first: one round for the two streams, before its first store
    # (of residual_out), except where ptxas is known to split it (ADD_TWO_ROUNDS), never more.
    rounds = {name: code.x_load_rounds() for name, code in sorted(sass.items()) if "streaming" not in name}
    assert rounds and all(r >= 1 for r in rounds.values()), rounds
    assert any(is_add(variant_of(name)[0]) for name in rounds), sorted(rounds)
    slow = {name: r for name, r in rounds.items() if r != (2 if name in ADD_TWO_ROUNDS else 1)}
    assert not slow, f"dependent x-load rounds per row (want 1; {sorted(ADD_TWO_ROUNDS)}: 2): {slow}"


def test_warp_rows_loads_held_weight_and_bias_with_x(machine_code):
    # Where warp_rows holds weight and bias (x, the add's residual, weight and bias of at most 96 bytes per lane,
    # not for one-double vectors, rows at their phase), their loads share x's round. The kernel has a version of
    # the row's code for rows at weight's and bias's phase (held) and one for the others; in each held version,
    # the global loads before the warp's reduction (its first shuffle) are 3 vectors per chunk (4 for the add)
    # and the row's edge element (x's, and the residual's), in one round.
    sass, _ = machine_code
    slow, held = {}, {"warp_rows_kernel": 0, "add_warp_rows_kernel": 0}
    for name, code in sorted(sass.items()):
        kernel, element, vec = variant_of(name)
        if kernel not in held:
            continue
        chunks = chunks_of(name)
        streams = 2 if is_add(kernel) else 1  # x, and the add's residual
        if (streams + 2) * chunks * vec * ELEMENT_BYTES[element] > 96 or (element == "double" and vec == 1):
            continue  # not held (fused_norm_cuda.cu, kHoldParams)
        held[kernel] += 1
        found = []
        for path in code.row_paths_before_the_reduction():
            loads = [i for i in path if i.is_global_load]
            vectors = [i for i in loads if i.access_bits == vec * ELEMENT_BYTES[element] * 8]
            # a held version: x (and residual), weight and bias per chunk, the edge element (none with
            # one-element vectors)
            if len(loads) == (streams + 2) * chunks + streams * (vec > 1):
                found.append((count_load_rounds(path, lambda inst: True), len(vectors) >= (streams + 2) * chunks))
        if not found or set(found) != {(1, True)}:
            slow[name] = f"held versions (rounds, {streams + 2} vectors per chunk): {found}"
    assert all(held.values()) and not slow, (held, slow)


def body_and_edge_accesses(code: KernelCode, element: str, vec: int) -> dict[str, list[Instruction]]:
    """The global accesses by role: x's loads (evict-first; the add's residual loads and its second-pass loads of
    the sum alike), weight's and bias's loads (cached, read-only), x's first-pass loads (L2, the norm's streaming
    kernel), the stores (y, and the add's residual_out); each split into vector-wide and one-element ones."""
    wide, narrow = ELEMENT_BYTES[element] * vec * 8, ELEMENT_BYTES[element] * 8
    roles = {
        "x": lambda i: i.is_streaming_load,
        "params": lambda i: i.is_global_load and ".CONSTANT" in i.opcode,
        "x_l2": lambda i: i.is_global_load and ".STRONG" in i.opcode,
        "y": lambda i: i.is_global_store,
    }
    out = {}
    for role, selects in roles.items():
        accesses = [i for i in code.global_accesses if selects(i)]
        out[f"{role} vector"] = [i for i in accesses if i.access_bits == wide]
        out[f"{role} element"] = [i for i in accesses if i.access_bits == narrow and wide != narrow]
        out[f"{role} other"] = [i for i in accesses if i.access_bits not in (wide, narrow)]
    return out


def test_body_accesses_are_vector_wide_and_the_rest_one_element(machine_code):
    # The head/body/tail split: a row of any length at any phase moves its body in whole vectors (16 bytes on
    # the 16-byte path: LDG.E.EF.128 for x, STG.E.EF.128 for y, LDG.E.128.CONSTANT for weight and bias at x's
    # phase), one per chunk in the register kernels; x's and y's edge element is the only narrower access to
    # them, one element wide; nothing is moved in a width between (a split vector).
    sass, _ = machine_code
    wrong = []
    for name, code in sorted(sass.items()):
        kernel, element, vec = variant_of(name)
        got = body_and_edge_accesses(code, element, vec)
        counts = {role: len(accesses) for role, accesses in got.items()}
        problems = [f"{role} {[i.opcode for i in got[role]]}" for role in got if role.endswith("other") and got[role]]
        streams = 2 if is_add(kernel) else 1  # x and y; the add's residual and residual_out beside them
        if kernel == "streaming_rows_kernel":
            body = {"x vector": counts["x vector"] >= 1, "x_l2 vector": counts["x_l2 vector"] >= 1}
        elif kernel == "add_streaming_rows_kernel":
            # pass 1: x and residual evict-first, the sum stored to L2 (STG.STRONG.GPU) for pass 2, which reads
            # it back evict-first; no L2-only load
            l2_stores = [i for i in got["y vector"] if ".STRONG" in i.opcode]
            body = {"x vector": counts["x vector"] >= 3, "residual_out vector to L2": bool(l2_stores)}
            body["y vector"] = counts["y vector"] >= 2
        else:
            # x and y (the add: x and residual, residual_out and y): one vector access per chunk and stream in
            # each version of the row's code (warp_rows has one for rows at weight's and bias's phase and one for
            # the others).
            per_version = chunks_of(name) * streams
            versions, rest = divmod(counts["x vector"], per_version)
            body = {"x vector": versions >= 1 and rest == 0, "y vector": counts["y vector"] == counts["x vector"]}
        body["y vector"] = body.get("y vector", counts["y vector"] >= 1)
        body["params vector"] = counts["params vector"] >= 2
        if vec > 1:
            # the edge element: at most one load of each stream (per pass and path) and one store of each per
            # row path
            body["x element"] = streams <= counts["x element"] <= 2 * streams
            body["y element"] = streams <= counts["y element"] <= 2 * streams
        problems += [f"{role}: {counts[role]}" for role, ok in body.items() if not ok]
        if vec * ELEMENT_BYTES[element] == 16:
            opcodes = {i.opcode for i in code.global_accesses}
            problems += [op for op in ("LDG.E.EF.128", "STG.E.EF.128", "LDG.E.128.CONSTANT") if op not in opcodes]
        if problems:
            wrong.append(f"{name}: {'; '.join(problems)} (accesses by role: {counts})")
    assert not wrong, "\n".join(wrong)


def test_16_byte_variants_exist_for_every_kernel_and_dtype(machine_code):
    sass, _ = machine_code
    wide = {
        (variant_of(n)[0], variant_of(n)[1]) for n in sass if variant_of(n)[2] * ELEMENT_BYTES[variant_of(n)[1]] == 16
    }
    kernels = {variant_of(n)[0] for n in sass}
    assert wide == {(k, e) for k in kernels for e in ELEMENT_BYTES}


def test_no_spills_and_enough_blocks_per_sm(machine_code, planned_threads):
    _, resources = machine_code
    short = []
    for name, r in sorted(resources.items()):
        kernel = variant_of(name)[0]
        want = min_blocks(name)
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_frame_bytes"] == 0, r
        threads = planned_threads[family(kernel)]
        blocks = blocks_per_sm(r["registers"], threads, r["shared_bytes"])
        if blocks < want:
            short.append(f"{name}: {r['registers']} registers -> {blocks} blocks of {threads} (want {want})")
    assert not short, "\n".join(short)


def test_round_counter_sees_a_dependent_load():
    # Two loads then their uses: one round. A load after a use of an earlier
    # one's value waits a full latency more: each such load is a new round.
    from tests.helpers.sass import parse_sass

    text = """
        Function : k
        /*0000*/                   LDG.E.EF.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   LDG.E.EF.128 R8, desc[UR4][R20.64] ;
        /*0020*/                   FFMA R12, R4, R4, RZ ;
        /*0030*/                   FFMA R12, R9, R9, R12 ;
        /*0040*/                   STG.E.EF.128 desc[UR4][R2.64], R4 ;
        Function : j
        /*0000*/                   LDG.E.EF.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   FFMA R12, R4, R4, RZ ;
        /*0020*/              @!P0 LDG.E.EF.64 R8, desc[UR4][R20.64] ;
        /*0030*/                   FFMA R12, R9, R9, R12 ;
        /*0040*/                   LDG.E.EF R10, desc[UR4][R20.64] ;
        /*0050*/                   STG.E.EF desc[UR4][R2.64], R10 ;
    """
    kernels = parse_sass(text)
    assert kernels["k"].x_load_rounds() == 1
    assert kernels["j"].x_load_rounds() == 3
    assert [i.access_bits for i in kernels["j"].global_accesses] == [128, 64, 32, 32]


def main() -> None:
    """Print registers, blocks per SM, load rounds and access widths per variant."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        check = cuda_build.compile_check(Path(tmp), arch_list="9.0", adapters=False)
        (obj,) = [Path(o["path"]) for o in check.report["objects"] if o["target"] == "sm_90"]
        sass = disassemble(obj, CUOBJDUMP)
        probe = build_probe(Path(tmp))
        threads = {
            p["kernel"]: p["threads"]
            for p in plans(probe, [(4096, 512, 2, 16), (4096, 8192, 2, 16), (16, 1 << 20, 2, 16)])
        }
    print(f"{'variant':40s} {'regs':>4s} {'spill':>5s} {'blocks/SM':>12s} {'rounds':>6s}  widths")
    for k in sorted(check.report["kernels"], key=lambda k: k["kernel"]):
        name, code = k["kernel"], sass[k["kernel"]]
        kernel = family(variant_of(name)[0])
        rounds = "-" if "streaming" in name else str(code.x_load_rounds())
        widths = ",".join(str(b) for b in sorted({i.access_bits for i in code.global_accesses}))
        blocks = f"{blocks_per_sm(k['registers'], threads[kernel], k['shared_bytes'])}x{threads[kernel]}"
        print(
            f"{name:40s} {k['registers']:4d} {k['spill_store_bytes'] + k['spill_load_bytes']:5d} {blocks:>12s} "
            f"{rounds:>6s}  {widths}"
        )


if __name__ == "__main__":
    main()
