"""Reading the kernels' machine code (SASS) from a compiled object, without a GPU.

``cuobjdump -sass`` lists every kernel's instructions; this module splits the
listing per kernel and answers the questions the machine-code test asks:
how wide each global access is, and how many dependent rounds of x loads a
row costs (a load issued after an instruction that had to wait for an
earlier load's value is a new round: one more full memory latency).

cuobjdump comes from the ``nvidia-cuda-cuobjdump`` wheel (binaries under
site-packages/nvidia/cu13/bin); it is found through the installed package, not
PATH, so the venv's pinned copy is the one used.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from env.builder.ptxas import demangle, short_kernel_name


def nvidia_tool(name: str) -> Path | None:
    """A CUDA binary shipped by an installed ``nvidia-*`` wheel (``nvidia/cu*/bin/NAME``), or None."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}"), reverse=True):
            if candidate.is_file():
                return candidate
    return None


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str  # "" or "@!P3"
    opcode: str  # "LDG.E.EF.128"
    operands: str  # "R12, desc[UR12][R32.64]"

    @property
    def mnemonic(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def is_global_load(self) -> bool:
        return self.mnemonic == "LDG"

    @property
    def is_global_store(self) -> bool:
        return self.mnemonic == "STG"

    @property
    def access_bits(self) -> int:
        """Width of a global access: .128 / .64 / .U16 / .U8, else 32 bits."""
        mods = set(self.opcode.split(".")[1:])
        for bits, names in ((128, {"128"}), (64, {"64"}), (16, {"U16", "S16"}), (8, {"U8", "S8"})):
            if mods & names:
                return bits
        return 32

    @property
    def is_streaming_load(self) -> bool:
        """x's loads: the kernels read x with the evict-first hint (``__ldcs`` -> ``.EF``)."""
        return self.is_global_load and ".EF" in self.opcode

    def destination_registers(self) -> set[int]:
        """Registers a load writes: the first operand, widened to the access width."""
        m = re.match(r"R(\d+)", self.operands)
        if not m or not self.is_global_load:
            return set()
        first = int(m.group(1))
        return set(range(first, first + max(1, self.access_bits // 32)))

    def mentioned_registers(self) -> set[int]:
        """Every general register named, a ``R32.64`` pair counting as R32 and R33."""
        regs: set[int] = set()
        for m in re.finditer(r"\bR(\d+)(\.64)?", self.operands):
            regs.add(int(m.group(1)))
            if m.group(2):
                regs.add(int(m.group(1)) + 1)
        return regs


@dataclass
class KernelCode:
    name: str  # short readable name, e.g. "block_rows_kernel<BFloat16, 8, 4>"
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def global_accesses(self) -> list[Instruction]:
        return [i for i in self.instructions if i.is_global_load or i.is_global_store]

    def first_row_region(self, stop_at: str = "STG") -> list[Instruction]:
        """Instructions before the first ``stop_at`` (default: the row's first global store)."""
        region = []
        for inst in self.instructions:
            if inst.mnemonic == stop_at:
                break
            region.append(inst)
        return region

    def x_load_rounds(self) -> int:
        """Dependent rounds of x loads before the row's first store."""
        return self.load_rounds(lambda inst: inst.is_streaming_load)

    def load_rounds(self, counts, stop_at: str = "STG") -> int:
        """Dependent rounds of the loads ``counts`` selects, before the first ``stop_at``.

        Walks the code in program order. Each counted load's destination
        registers are pending until an instruction names one of them (it must
        wait for the value: the load's latency is paid there). A counted load
        issued after such a wait starts a new round. One round = all of them
        in flight at once.
        """
        return count_load_rounds(self.first_row_region(stop_at), counts)

    def row_paths_before_the_reduction(self) -> list[list[Instruction]]:
        """Where a kernel has several versions of a row's code (one per branch), each version's instructions up
        to its warp reduction (its first shuffle, xor 16), from the last global store before it that a global
        load follows (the end of the version before) or the kernel's start. A store with no load after it
        before the reduction is the version's own (the add's residual_out, stored before its reduction)."""

        def is_reduction(inst: Instruction) -> bool:
            return inst.mnemonic == "SHFL" and re.search(r",\s*0x10\s*,", inst.operands) is not None

        # For each instruction: whether a global load comes after it before the next reduction.
        load_follows, seen = [False] * len(self.instructions), False
        for index in range(len(self.instructions) - 1, -1, -1):
            inst = self.instructions[index]
            load_follows[index] = seen
            if is_reduction(inst):
                seen = False
            elif inst.is_global_load:
                seen = True
        paths, start = [], 0
        for index, inst in enumerate(self.instructions):
            if is_reduction(inst):
                paths.append(self.instructions[start:index])
            if inst.is_global_store and load_follows[index]:
                start = index + 1
        return paths


def count_load_rounds(instructions: list[Instruction], counts) -> int:
    """Dependent rounds of the loads ``counts`` selects in ``instructions`` (see KernelCode.load_rounds)."""
    rounds, pending, waited = 0, set(), True
    for inst in instructions:
        if pending and inst.mentioned_registers() & pending:
            waited, pending = True, set()
        if inst.is_global_load and counts(inst):
            if waited:
                rounds, waited = rounds + 1, False
            pending |= inst.destination_registers()
    return rounds


_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def parse_sass(text: str) -> dict[str, KernelCode]:
    """{mangled name: KernelCode} from ``cuobjdump -sass`` output (names not demangled)."""
    kernels: dict[str, KernelCode] = {}
    current: KernelCode | None = None
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            current = kernels.setdefault(m.group(1), KernelCode(m.group(1)))
        elif current is not None and (m := _INSTRUCTION.match(line)):
            current.instructions.append(
                Instruction(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip())
            )
    return kernels


def disassemble(obj: Path, cuobjdump: Path) -> dict[str, KernelCode]:
    """{short kernel name: KernelCode} of every kernel in a compiled object."""
    out = subprocess.run([str(cuobjdump), "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    by_mangled = parse_sass(out)
    readable = demangle(list(by_mangled))
    result = {}
    for code, pretty in zip(by_mangled.values(), readable, strict=True):
        code.name = short_kernel_name(pretty)
        result[code.name] = code
    return result


# --- occupancy on sm_90 ------------------------------------------------------------------

SM90_REGISTERS_PER_SM = 65536
SM90_MAX_THREADS_PER_SM = 2048
SM90_MAX_BLOCKS_PER_SM = 32
SM90_REGISTER_ALLOCATION_UNIT = 256  # registers, allocated per warp


def blocks_per_sm(registers: int, threads: int, shared_bytes: int = 0) -> int:
    """Resident blocks of ``threads`` threads per sm_90 SM for a kernel using ``registers`` per thread."""
    per_warp = -(-registers * 32 // SM90_REGISTER_ALLOCATION_UNIT) * SM90_REGISTER_ALLOCATION_UNIT
    warps_per_block = -(-threads // 32)
    by_registers = (SM90_REGISTERS_PER_SM // per_warp) // warps_per_block if per_warp else SM90_MAX_BLOCKS_PER_SM
    by_threads = SM90_MAX_THREADS_PER_SM // (warps_per_block * 32)
    by_shared = (228 * 1024) // (shared_bytes + 1024) if shared_bytes else SM90_MAX_BLOCKS_PER_SM
    return min(by_registers, by_threads, by_shared, SM90_MAX_BLOCKS_PER_SM)
