"""The CUDA kernels run in the SIMT emulator (csrc/emu), driven from Python.

``check_case`` runs one problem through ``fused_norm::cuda_forward`` (or, for
the residual add + norm, ``fused_norm::cuda_add_forward``, out of place or in
place) exactly as an adapter would, with the race detector on and in the given
schedule, on buffers with random guard bytes on both sides, the separate
outputs poisoned with all-ones bytes (NaN in every dtype) and each operand
placed on or one element off a 16-byte boundary, and returns every problem it
finds: launch errors (with the emulator's message: a data race names the
kernel, block, threads, buffer and source lines), a kernel other than the one
the launch plan picks, unwritten outputs, touched guards or inputs, values
outside the dtype's tolerance against the float64 reference, and a stored sum
that is not x + residual rounded to the dtype bit for bit.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from env.builder.ptxas import short_kernel_name
from ops.reference import TOLERANCES, activations, make_inputs, reference_add_norm, reference_norm
from tests.helpers.cuda_variants import KERNEL_TYPES, build_probe, plans, read_variants

DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}
DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16"}
ORDERS = {"round_robin": 0, "warp_ahead": 1, "reverse": 2}  # simt::Order, the fixed ones
# Seeded: "random:SEED", "stress:SEED" (stress also yields at every shared-memory access).
RANDOM_ORDERS = {"random": 3, "stress": 4}
SEEDS_ENV = "FUSEDBENCH_EMU_SEEDS"  # random seeds per test (tests/conftest.py: --emu-seeds)
OPERANDS = ("x", "weight", "bias", "y")
# The ops a case runs: the norm, the residual add + norm, and its in-place form (y into x, the sum into residual).
OPS = ("norm", "add", "add_inplace")
ADD_OPERANDS = ("x", "residual", "weight", "bias", "residual_out", "y")
# The in-place form's outputs are these inputs' buffers.
IN_PLACE = {"y": "x", "residual_out": "residual"}
VECTOR_BYTES = 16
GUARD_BYTES = 64


@dataclass(frozen=True)
class Launch:
    kernel: str  # short name, e.g. "warp_rows_kernel<float, 4, 2>"
    grid: int  # gridDim.x as launched
    grid_run: int  # gridDim.x the emulator ran (after the test's cap)
    threads: int  # blockDim.x


class EmulatedKernels:
    """ctypes view of a library built by env.builder.cuda_emulation.build_emulated_kernels."""

    def __init__(self, path: Path):
        self.path = path
        lib = ctypes.CDLL(str(path))
        # (pointers..., rows, hidden, eps, dtype): the norm's 4 operands, the add's 6
        for name, pointers in (("fused_norm_emulated_forward", 4), ("fused_norm_emulated_add_forward", 6)):
            entry = getattr(lib, name)
            entry.argtypes = [ctypes.c_void_p] * pointers + [
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_double,
                ctypes.c_int,
            ]
            entry.restype = ctypes.c_int
        lib.simt_set_order.argtypes = [ctypes.c_int]
        lib.simt_set_seed.argtypes = [ctypes.c_uint64]
        lib.simt_set_race_detection.argtypes = [ctypes.c_int]
        lib.simt_set_max_grid_x.argtypes = [ctypes.c_int64]
        lib.simt_last_error_message.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.simt_last_error_message.restype = ctypes.c_size_t
        lib.simt_launch_count.restype = ctypes.c_int
        lib.simt_launch_info.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t] + [
            ctypes.POINTER(ctypes.c_int64)
        ] * 3
        for name in ("fused_norm_emulated_to_float", "fused_norm_emulated_from_float"):
            getattr(lib, name).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        self.lib = lib

    def to_float(self, bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The kernels' 16-bit -> float conversion of ``bits`` (int16 patterns of ``dtype``)."""
        out = torch.empty(bits.shape, dtype=torch.float32)
        assert (
            self.lib.fused_norm_emulated_to_float(DTYPE_CODES[dtype], bits.data_ptr(), out.data_ptr(), bits.numel())
            == 0
        )
        return out

    def from_float(self, values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The kernels' float -> 16-bit conversion, as int16 bit patterns."""
        out = torch.empty(values.shape, dtype=torch.int16)
        assert (
            self.lib.fused_norm_emulated_from_float(
                DTYPE_CODES[dtype], values.data_ptr(), out.data_ptr(), values.numel()
            )
            == 0
        )
        return out

    def set_schedule(self, schedule: str, detect_races: bool = True) -> None:
        """A fixed order ("round_robin", "warp_ahead", "reverse") or a seeded one ("random:SEED", "stress:SEED")."""
        set_schedule(self.lib, schedule, detect_races)

    def forward(
        self,
        ptrs: dict[str, int],
        rows: int,
        hidden: int,
        eps: float,
        dtype: torch.dtype,
        order: str,
        max_grid: int,
        detect_races: bool = True,
    ) -> tuple[int, str, list[Launch]]:
        """Run cuda_forward in schedule ``order`` (see set_schedule), or cuda_add_forward where ``ptrs`` has a
        residual; returns (its return code, the emulator's error message, the launches)."""
        lib = self.lib
        self.set_schedule(order, detect_races)
        lib.simt_set_max_grid_x(max_grid)
        lib.simt_clear_launches()
        if "residual" in ptrs:
            rc = lib.fused_norm_emulated_add_forward(
                *(ptrs[name] for name in ADD_OPERANDS), rows, hidden, eps, DTYPE_CODES[dtype]
            )
        else:
            rc = lib.fused_norm_emulated_forward(
                ptrs["x"], ptrs["weight"], ptrs["bias"], ptrs["y"], rows, hidden, eps, DTYPE_CODES[dtype]
            )
        message = ctypes.create_string_buffer(4096)
        lib.simt_last_error_message(message, len(message))
        launches = []
        for i in range(lib.simt_launch_count()):
            name = ctypes.create_string_buffer(1024)
            grid, grid_run, threads = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
            lib.simt_launch_info(i, name, len(name), ctypes.byref(grid), ctypes.byref(grid_run), ctypes.byref(threads))
            launches.append(Launch(short_kernel_name(name.value.decode()), grid.value, grid_run.value, threads.value))
        return rc, message.value.decode(), launches


def set_schedule(lib: ctypes.CDLL, schedule: str, detect_races: bool = True) -> None:
    """Set the scheduling order (and seed) and the race detector of an emulator library."""
    kind, _, seed = schedule.partition(":")
    if kind in ORDERS and not seed:
        lib.simt_set_order(ORDERS[kind])
    elif kind in RANDOM_ORDERS and seed.isdigit():
        lib.simt_set_order(RANDOM_ORDERS[kind])
        lib.simt_set_seed(int(seed))
    else:
        raise ValueError(f"schedule {schedule!r}: expected one of {sorted(ORDERS)} or random:SEED / stress:SEED")
    lib.simt_set_race_detection(int(detect_races))


def seed_count() -> int:
    """Random seeds per schedule kind (FUSEDBENCH_EMU_SEEDS, default 1)."""
    value = os.environ.get(SEEDS_ENV, "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SEEDS_ENV}={value!r}: expected a whole number >= 1")
    return int(value)


def schedules(kind: str, generator: torch.Generator) -> list[str]:
    """The schedules of one kind: a fixed order as itself, a random kind once per seed (seed_count() seeds drawn from
    ``generator``, so a run's seed replays them; each is named in the problems it finds)."""
    if kind in ORDERS:
        return [kind]
    if kind not in RANDOM_ORDERS:
        raise ValueError(f"schedule kind {kind!r}: expected one of {sorted(ORDERS) + sorted(RANDOM_ORDERS)}")
    seeds = torch.randint(0, 2**62, (seed_count(),), dtype=torch.int64, generator=generator).tolist()
    return [f"{kind}:{s}" for s in seeds]


SCHEDULE_KINDS = [*ORDERS, *RANDOM_ORDERS]


@functools.cache
def load_emulated_kernels(kernel_source: Path | None = None) -> EmulatedKernels:
    """Build (cached on disk) and load the emulated kernels; skips the test where CUDA's headers are missing."""
    from env.builder.cuda_emulation import EmulationBuildError, build_emulated_kernels, cuda_headers

    try:
        cuda_headers()
    except EmulationBuildError as error:
        pytest.skip(str(error))
    return EmulatedKernels(build_emulated_kernels(kernel_source))


@contextlib.contextmanager
def one_torch_thread():
    """torch on one thread while cases run: each case is a few small tensor operations, for which
    intra-op threads only add wake-ups (10x slower on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --- cases and the plan they must take ---------------------------------------------------------


@dataclass(frozen=True)
class Case:
    dtype: torch.dtype
    rows: int
    hidden: int
    misaligned: str | None = None  # operand that starts `offset` bytes past a 16-byte boundary
    max_grid: int = 0  # cap on gridDim.x, so grid-stride loops run more than once (0: none)
    offset: int = 0  # bytes; 0 with `misaligned` set: one element
    # Operands that start this many elements past a 16-byte boundary, as a slice of a larger buffer does,
    # e.g. (("x", 1), ("y", 1)); over `misaligned` for the operands it names.
    element_offsets: tuple[tuple[str, int], ...] = ()
    op: str = "norm"  # one of OPS

    def operands(self) -> tuple[str, ...]:
        """The op's operands, in the order of its emulator entry point."""
        return OPERANDS if self.op == "norm" else ADD_OPERANDS

    def buffers(self) -> tuple[str, ...]:
        """The operands with a buffer of their own (in place, y and residual_out are x's and residual's)."""
        return tuple(o for o in self.operands() if self.op != "add_inplace" or o not in IN_PLACE)

    def streams(self) -> tuple[str, ...]:
        """The operands accessed at x's element index in one thread: the plan's vector must suit all of them."""
        return ("x", "y") if self.op == "norm" else ("x", "residual", "residual_out", "y")

    def phase(self, operand: str) -> int:
        """Bytes past a 16-byte boundary at which ``operand`` starts."""
        if self.op == "add_inplace":
            operand = IN_PLACE.get(operand, operand)
        offsets = dict(self.element_offsets)
        if operand in offsets:
            return offsets[operand] * element_bytes(self.dtype) % VECTOR_BYTES
        if operand != self.misaligned:
            return 0
        return self.offset or element_bytes(self.dtype)

    def alignment(self) -> int:
        """The plan's input: the largest power of two (up to 16) dividing the distance between x and every other
        stream (y; for the add also residual and residual_out)."""
        relative = 0
        for stream in self.streams():
            relative |= self.phase("x") ^ self.phase(stream)
        return VECTOR_BYTES if relative == 0 else relative & -relative

    def __str__(self) -> str:
        where = f", {self.misaligned} {self.phase(self.misaligned)} B off alignment" if self.misaligned else ""
        where += "".join(f", {name} {n} elements off" for name, n in self.element_offsets)
        cap = f", grid capped at {self.max_grid}" if self.max_grid else ""
        op = "" if self.op == "norm" else f" {self.op}"
        return f"{DTYPE_NAMES[self.dtype]}{op} {self.rows}x{self.hidden}{where}{cap}"


def element_bytes(dtype: torch.dtype) -> int:
    return KERNEL_TYPES[DTYPE_NAMES[dtype]][1]


@functools.lru_cache(maxsize=1)
def plan_probe() -> Path:
    import tempfile

    return build_probe(Path(tempfile.mkdtemp(prefix="cuda_plan_probe_")))


@functools.lru_cache(maxsize=1)
def plan_variants() -> dict:
    """The launch plan's table of variants (tests/helpers/cuda_variants.read_variants)."""
    return read_variants(plan_probe())


def expected_launches(cases: list[Case]) -> list[Launch]:
    """The launch make_plan() chooses for each case (name as the emulator reports it)."""
    # The plan's last input: the operands' common alignment in bytes where the plan knows vector widths
    # below 16 bytes (the probe lists them), else whether every operand is 16-byte aligned.
    by_bytes = "vector_widths" in plan_variants()
    rows = [
        (c.rows, c.hidden, element_bytes(c.dtype), c.alignment() if by_bytes else int(c.alignment() == 16))
        for c in cases
    ]
    out = []
    for case, p in zip(cases, plans(plan_probe(), rows), strict=True):
        type_name = KERNEL_TYPES[DTYPE_NAMES[case.dtype]][0]
        args = [type_name, str(p["vec"])] + ([str(p["chunks"])] if p["kernel"] != "streaming_rows_kernel" else [])
        grid_run = min(p["blocks"], case.max_grid) if case.max_grid else p["blocks"]
        kernel = p["kernel"] if case.op == "norm" else add_kernel_name(p["kernel"])
        out.append(Launch(f"{kernel}<{', '.join(args)}>", p["blocks"], grid_run, p["threads"]))
    return out


# --- buffers with guards --------------------------------------------------------------------------


class GuardedBuffer:
    """``numel`` elements of ``dtype`` between two random guard regions, starting ``phase`` bytes past a
    16-byte boundary."""

    def __init__(self, numel: int, dtype: torch.dtype, phase: int, generator: torch.Generator):
        esize = torch.empty((), dtype=dtype).element_size()
        self.nbytes = numel * esize
        self.raw = torch.randint(
            0, 256, (GUARD_BYTES + VECTOR_BYTES + self.nbytes + GUARD_BYTES,), dtype=torch.uint8, generator=generator
        )
        start = GUARD_BYTES + (phase - self.raw.data_ptr() - GUARD_BYTES) % VECTOR_BYTES
        assert start % esize == 0, "torch's allocation is not aligned to the element size"
        self.start = start
        self.data = self.raw[start : start + self.nbytes].view(dtype)
        assert self.data.data_ptr() % VECTOR_BYTES == phase
        self.guards_before = self.guards()

    def guards(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.raw[: self.start].clone(), self.raw[self.start + self.nbytes :].clone()

    def guards_intact(self) -> bool:
        return all(torch.equal(a, b) for a, b in zip(self.guards(), self.guards_before, strict=True))


def check_case(
    kernels: EmulatedKernels,
    case: Case,
    order: str,
    generator: torch.Generator,
    expected: Launch | None = None,
    detect_races: bool = True,
) -> tuple[list[str], Launch | None]:
    """Run ``case`` in schedule ``order`` (EmulatedKernels.set_schedule); return (the problems found, the launch the
    emulator ran)."""
    return check_case_in_schedules(kernels, case, [order], generator, expected, detect_races)


def check_case_in_schedules(
    kernels: EmulatedKernels,
    case: Case,
    orders: list[str],
    generator: torch.Generator,
    expected: Launch | None = None,
    detect_races: bool = True,
) -> tuple[list[str], Launch | None]:
    """check_case in each schedule of ``orders`` on the same inputs (prepared and referenced once); returns every
    problem and the last launch that ran."""
    inputs, references, eps = _case_inputs(case, generator)
    shape = (case.rows, case.hidden)
    buffers = {}
    for name in case.buffers():
        numel = case.hidden if name in ("weight", "bias") else case.rows * case.hidden
        buffers[name] = GuardedBuffer(numel, case.dtype, case.phase(name), generator)

    def buffer_of(operand: str) -> GuardedBuffer:
        return buffers[operand if operand in buffers else IN_PLACE[operand]]

    ptrs = {name: buffer_of(name).data.data_ptr() for name in case.operands()}
    # Inputs whose buffer no output shares must keep their bytes.
    unchanged = {n: v for n, v in inputs.items() if case.op != "add_inplace" or n not in IN_PLACE.values()}
    problems: list[str] = []
    ran = None
    for order in orders:
        for name, buffer in buffers.items():
            if name in inputs:
                buffer.data.copy_(inputs[name].reshape(-1))  # again: the in-place form overwrote x and residual
            else:
                buffer.data.view(torch.uint8).fill_(0xFF)  # NaN in all four dtypes: every element must be written
        rc, message, launches = kernels.forward(
            ptrs, case.rows, case.hidden, eps, case.dtype, order, case.max_grid, detect_races
        )
        written = {name: buffer_of(name).data.reshape(shape) for name in references}
        found, launch = _inspect(
            case, f"{case} [{order}]", rc, message, launches, expected, buffers, unchanged, written, references
        )
        problems += found
        ran = launch or ran
    return problems, ran


def _case_inputs(case: Case, generator: torch.Generator) -> tuple[dict, dict, float]:
    """({input: values}, {output: (reference, exact)}, eps) of ``case``: the norm's y against the float64 reference
    within the dtype's tolerance; the add's stored sum bit for bit against x + residual in the dtype (the CPU op's
    sum: added in float, or double for float64, and rounded once), and its y against the float64 reference of the
    norm of that sum."""
    shape = (case.rows, case.hidden)
    x, weight, bias = make_inputs(shape, case.dtype, generator)
    eps = float(torch.empty(()).uniform_(1e-6, 1e-4, generator=generator))
    if case.op == "norm":
        return {"x": x, "weight": weight, "bias": bias}, {"y": (reference_norm(x, weight, bias, eps), False)}, eps
    residual = activations(shape, torch.float32, generator).to(case.dtype)
    y, _ = reference_add_norm(x, residual, weight, bias, eps)
    inputs = {"x": x, "residual": residual, "weight": weight, "bias": bias}
    return inputs, {"residual_out": (x + residual, True), "y": (y, False)}, eps


def _inspect(
    case: Case,
    label: str,
    rc: int,
    message: str,
    launches: list[Launch],
    expected: Launch | None,
    buffers: dict[str, GuardedBuffer],
    unchanged: dict[str, torch.Tensor],
    written: dict[str, torch.Tensor],
    references: dict[str, tuple[torch.Tensor, bool]],
) -> tuple[list[str], Launch | None]:
    """The problems of one run of ``case``: ``unchanged`` inputs must keep their bytes, each ``written`` output must
    match its reference (exactly, or within the dtype's tolerance)."""
    if rc != 0:
        return [f"{label}: cuda_forward returned {rc}: {message or 'no emulator message'}"], None
    problems = []
    launch = launches[0] if len(launches) == 1 else None
    if launch is None:
        problems.append(f"{label}: {len(launches)} launches instead of 1: {launches}")
    elif expected is not None and launch != expected:
        problems.append(f"{label}: ran {launch}, the plan says {expected}")
    for name, buffer in buffers.items():
        if not buffer.guards_intact():
            problems.append(f"{label}: bytes around {name} were overwritten")
    for name, value in unchanged.items():
        if not torch.equal(buffers[name].data.view(torch.uint8), value.reshape(-1).view(torch.uint8)):
            problems.append(f"{label}: input {name} was modified")
    for name, (ref, exact) in references.items():
        got = written[name]
        unwritten = torch.isnan(got)
        if unwritten.any():
            first = unwritten.nonzero()[0].tolist()
            problems.append(
                f"{label}: {int(unwritten.sum())} {name} elements never written, first at (row, col) {first}"
            )
        if exact:
            bad = (_bits(got) != _bits(ref)) & ~unwritten
            what = "not bit for bit x + residual in the dtype"
        else:
            tol = TOLERANCES[case.dtype]
            bad = ~((got.double() - ref).abs() <= tol.atol + tol.rtol * ref.abs()) & ~unwritten
            what = f"outside rtol={tol.rtol:g} atol={tol.atol:g}"
        if bad.any():
            r, c = bad.nonzero()[0].tolist()
            problems.append(
                f"{label}: {int(bad.sum())} {name} elements {what}, "
                f"first at ({r}, {c}): {float(got[r, c])} vs reference {float(ref[r, c])}"
            )
    return problems, launch


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of ``t`` as integers of its element size (so -0.0 and 0.0 differ)."""
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def add_kernel_name(kernel: str) -> str:
    """The add + norm's kernel of a family: 'warp_rows_kernel' -> 'add_warp_rows_kernel'."""
    return f"add_{kernel}"


def plan_thresholds(variants: dict) -> list[int]:
    """Vectors per row at which make_plan() changes kernel, chunks or block size (the last value of each range)."""
    warp = [32 * c for c in variants["warp_rows_kernel"]]
    (chunks,) = variants["block_rows_kernel"]
    smallest_block = 64 * chunks  # 64-thread minimum
    return sorted(set(warp + [smallest_block, smallest_block + 32 * chunks, variants["max_threads"] * chunks]))


def standard_cases(dtype: torch.dtype, variants: dict, op: str = "norm") -> list[Case]:
    """Row lengths that hit every branch, for every vector width, with rows sharing blocks.

    Per width (16, 8 and 4 bytes, and one element): the row lengths, in whole
    vectors, on both sides of every plan threshold, with one stream (x or y;
    for the add also residual or residual_out) placed so that the width is the
    widest all allow; plus the fixed short lengths on aligned and on
    one-element-off pointers (every operand in turn), one streaming-size row
    per width, and weight or bias off x's phase on the 16-byte path. ``op``
    (one of OPS) is the op every case runs; in place, an output has no buffer
    to move, so only the inputs take the offsets.
    """
    probe = Case(dtype, 1, 1, op=op)
    streams = tuple(s for s in probe.streams() if s in probe.buffers())
    movable = tuple(o for o in probe.operands() if o in probe.buffers())
    esize = element_bytes(dtype)
    widths = sorted({w for w in (VECTOR_BYTES, 8, 4, esize) if w >= esize}, reverse=True)
    streaming = variants["max_threads"] * variants["block_rows_kernel"][0] + 1  # vectors
    # (hidden, operands the offset may go to, offset in bytes; 0: all aligned)
    layouts: list[tuple[int, tuple[str, ...], int]] = []
    for width in widths:
        vec, offset = width // esize, (0 if width == VECTOR_BYTES else width)
        for t in plan_thresholds(variants):
            layouts += [((t + d) * vec, streams, offset) for d in (-1, 0, 1)]
        layouts.append((streaming * vec, streams, offset))
    layouts += [(h, movable, o) for h in (1, 7, 31, 32, 33, 127, 128, 129) for o in (0, esize)]
    vec = VECTOR_BYTES // esize
    layouts += [((t + d) * vec, ("weight", "bias"), esize) for t in plan_thresholds(variants) for d in (-1, 1)]
    cases = []
    for i, (hidden, operands, offset) in enumerate(layouts):
        # 9 rows: warp kernels share blocks (4 rows each, the last block part-filled); every other case caps
        # the grid at 2 blocks so that every kernel's grid-stride loop runs several rows per block (the
        # streaming-size rows at 1 block, to keep them cheap).
        rows, cap = (2, 1) if hidden >= streaming else (9, 2 * (i % 2))
        operand = operands[i % len(operands)] if offset else None
        cases.append(Case(dtype, rows, hidden, operand, cap, offset, op=op))
    return cases
