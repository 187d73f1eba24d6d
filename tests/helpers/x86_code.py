"""Reading the CPU kernel's x86-64 machine code from a built library, with ``objdump``.

The CPU kernel is compiled once per instruction-set level (x86-64-v4, x86-64-v3
and the baseline) and the loader picks one version. This module lists each
version's instructions, finds its loops from the backward branches, and
classifies the floating-point arithmetic inside them: scalar (``vmulss``,
``vaddsd``, ``cvtsi2ss``...) or packed (``vmulps``...) and, if packed, at which
register width (xmm 128, ymm 256, zmm 512 bits).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# Floating-point arithmetic (AT&T mnemonics). Moves, shuffles, logic and
# integer instructions are not arithmetic on values and are not counted.
_FP_OPS = r"(?:add|sub|mul|div|sqrt|min|max|rcp|rsqrt|f(?:n?m(?:add|sub))\d{3}|round)"
SCALAR_FP = re.compile(rf"^v?(?:{_FP_OPS}s[sd]|cvt(?:t?s[sd]2si|si2s[sd]|s[sd]2s[sd]|sh2ss|ss2sh)[lq]?)$")
PACKED_FP = re.compile(rf"^v?(?:{_FP_OPS}p[sd]|cvt(?:t?p[sd]2dq|dq2p[sd]|ps2pd|pd2ps|ph2ps|ps2ph|ne2ps2bf16))[xy]?$")
REGISTER_BITS = {"xmm": 128, "ymm": 256, "zmm": 512}
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*?)\s*$")
_FUNCTION = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_JUMP_TARGET = re.compile(r"^([0-9a-f]+)\b")


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str
    operands: str

    @property
    def jump_target(self) -> int | None:
        """Address a direct jump goes to, or None (not a jump, or an indirect one)."""
        if not self.mnemonic.startswith("j"):
            return None
        m = _JUMP_TARGET.match(self.operands)
        return int(m.group(1), 16) if m else None

    @property
    def is_scalar_fp(self) -> bool:
        return bool(SCALAR_FP.match(self.mnemonic))

    @property
    def is_packed_fp(self) -> bool:
        return bool(PACKED_FP.match(self.mnemonic))

    @property
    def register_bits(self) -> int:
        """Width of the widest vector register named (the destination is the widest for arithmetic), or 0."""
        return max((REGISTER_BITS[r] for r in re.findall(r"%([xyz]mm)\d+", self.operands)), default=0)

    @property
    def destination(self) -> str:
        """The last operand (AT&T order), taking commas inside a memory operand's parentheses as part of it."""
        depth, start = 0, 0
        for k, ch in enumerate(self.operands):
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 0:
                start = k + 1
        return self.operands[start:].strip()

    @property
    def is_vector_move(self) -> bool:
        return self.mnemonic.startswith(("vmov", "mov")) and "mm" in self.operands

    def stores_vector_to_memory(self, frame_pointer: bool) -> bool:
        """A vector move whose destination is memory other than the stack frame (a spill is not an output);
        %rbp addresses the frame only where the function keeps a frame pointer."""
        if not self.is_vector_move:
            return False
        dest = self.destination
        return "(" in dest and not any(reg in dest for reg in _frame_registers(frame_pointer))

    def moves_vector_through_frame(self, frame_pointer: bool) -> bool:
        """A vector move to or from the stack frame: a spill or its reload."""
        return self.is_vector_move and any(
            f"({reg}" in self.operands or f"{reg})" in self.operands for reg in _frame_registers(frame_pointer)
        )


def _frame_registers(frame_pointer: bool) -> tuple[str, ...]:
    return ("%rsp", "%rbp") if frame_pointer else ("%rsp",)


@dataclass(frozen=True)
class Loop:
    start: int
    end: int  # address of the backward branch to start
    instructions: tuple[Instruction, ...]
    frame_pointer: bool = False  # the function addresses its stack frame through %rbp

    @cached_property
    def scalar_fp(self) -> list[Instruction]:
        return [i for i in self.instructions if i.is_scalar_fp]

    @cached_property
    def packed_fp(self) -> list[Instruction]:
        return [i for i in self.instructions if i.is_packed_fp]

    @property
    def does_fp_arithmetic(self) -> bool:
        return bool(self.scalar_fp or self.packed_fp)

    @property
    def writes_output(self) -> bool:
        return any(i.stores_vector_to_memory(self.frame_pointer) for i in self.instructions)

    @property
    def packed_widths(self) -> set[int]:
        return {i.register_bits for i in self.packed_fp}

    @property
    def store_widths(self) -> set[int]:
        """Register widths of the vector stores to output memory."""
        return {i.register_bits for i in self.instructions if i.stores_vector_to_memory(self.frame_pointer)}

    @property
    def makes_call(self) -> bool:
        return any(i.mnemonic.startswith("call") for i in self.instructions)

    @cached_property
    def frame_moves(self) -> list[Instruction]:
        """Vector moves to or from the stack frame: a hot loop that spills has no register for a value.

        Not counted where the span makes a call: there the calling convention saves the vector registers
        around it (a row's padded tail copied with memcpy, out of line, reached by a backward jump)."""
        if self.makes_call:
            return []
        return [i for i in self.instructions if i.moves_vector_through_frame(self.frame_pointer)]


@dataclass(frozen=True)
class Function:
    name: str
    instructions: tuple[Instruction, ...]

    @cached_property
    def innermost_loops(self) -> list[Loop]:
        """Loops (target of a backward branch .. that branch) that contain no other loop.

        A backward branch makes a loop only if control can flow from its target
        to it without leaving the span: GCC also places shared blocks and cold
        paths between a jump back to a shared tail and that tail, and such a
        span is no loop.
        """
        if not self.instructions:
            return []
        first = self.instructions[0].address
        spans = sorted(
            {
                (i.jump_target, i.address)
                for i in self.instructions
                if i.jump_target is not None
                and first <= i.jump_target <= i.address
                and self._flows_back(i.jump_target, i.address)
            }
        )
        inner = [(s, e) for s, e in spans if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in spans)]
        frame_pointer = any(i.mnemonic == "mov" and i.operands == "%rsp,%rbp" for i in self.instructions)
        return [Loop(s, e, tuple(i for i in self.instructions if s <= i.address <= e), frame_pointer) for s, e in inner]

    def _flows_back(self, start: int, branch: int) -> bool:
        """Whether the instruction at ``branch`` is reachable from ``start`` by paths inside [start, branch]."""
        body = [i for i in self.instructions if start <= i.address <= branch]
        index = {i.address: n for n, i in enumerate(body)}
        seen: set[int] = set()
        todo = [0] if body and body[0].address == start else []
        while todo:
            n = todo.pop()
            if n in seen or n >= len(body):
                continue
            seen.add(n)
            inst = body[n]
            if inst.address == branch:
                return True
            if inst.mnemonic.startswith("ret") or inst.mnemonic in {"ud2", "hlt"}:
                continue
            target = inst.jump_target
            if target is not None and target in index:
                todo.append(index[target])
            unconditional = inst.mnemonic in {"jmp", "jmpq"} or (inst.mnemonic.startswith("jmp") and target is None)
            if not unconditional:
                todo.append(n + 1)
        return False


def objdump() -> str | None:
    return shutil.which("objdump")


def disassemble(library: Path, name_contains: str) -> dict[str, Function]:
    """{mangled symbol: its instructions} for every function of `library` whose symbol contains `name_contains`."""
    listing = subprocess.run(
        [objdump() or "objdump", "-d", "-w", "--no-show-raw-insn", str(library)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for line in listing.splitlines():
        head = _FUNCTION.match(line)
        if head:
            current = functions.setdefault(head.group(2), []) if name_contains in head.group(2) else None
            continue
        if current is None:
            continue
        m = _LINE.match(line)
        if m:
            mnemonic, operands = m.group(2), m.group(3)
            if mnemonic in {"rep", "lock", "notrack", "bnd", "data16", "cs", "ds"} and operands:
                mnemonic, _, operands = operands.partition(" ")
            current.append(Instruction(int(m.group(1), 16), mnemonic, operands.split("#")[0].strip()))
    return {name: Function(name, tuple(insts)) for name, insts in functions.items()}
