"""The race detector and the schedules against a gallery of wrong kernels
(tests/csrc/race_gallery/*.cu), each beside its correct twin.

Each gallery file holds one bug of a class the old emulator let pass in its
fixed orders (a serial sum read without a second barrier, a shared exchange
without __syncwarp, a warp overwriting a slot a slower warp still reads, an
inter-block flag without a fence, a read of an unwritten shared slot, a read
of a slot whose thread returned early). The buggy kernel must be reported in
every schedule, naming the kernel and the lines the file marks with
``// gallery: read`` / ``// gallery: write``; the twin must run and compute
the right values in every schedule, with the detector on.
"""

from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path

import pytest

from tests.helpers.emulated_kernels import SCHEDULE_KINDS, schedules, set_schedule

pytestmark = pytest.mark.cuda_emulated

GALLERY = Path(__file__).parent / "race_gallery"
# file -> (buggy kernel, its correct twin)
KERNELS = {
    "serial_sum": ("serial_sum_read_without_barrier", "serial_sum_read_after_barrier"),
    "warp_exchange": ("exchange_without_syncwarp", "exchange_with_syncwarp"),
    "reused_slots": ("one_slot_set_for_every_row", "alternating_slot_sets"),
    "last_block": ("last_block_without_fence", "last_block_with_fence"),
    "tree_sum": ("tree_sum_reads_unwritten_half", "tree_sum"),
    "early_return": ("neighbour_of_an_exited_thread", "neighbour_within_the_data"),
}


@functools.lru_cache(maxsize=1)
def gallery_libraries() -> dict[str, ctypes.CDLL]:
    from env.builder.cuda_emulation import (
        EmulationBuildError,
        build_kernel_libraries,
        cuda_headers,
    )

    try:
        cuda_headers()
    except EmulationBuildError as error:
        pytest.skip(str(error))
    names = sorted(KERNELS)
    libraries = {}
    for name, path in zip(names, build_kernel_libraries([GALLERY / f"{name}.cu" for name in names]), strict=True):
        lib = ctypes.CDLL(str(path))
        lib.gallery_run.argtypes = [ctypes.c_int]
        lib.simt_last_error_message.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        libraries[name] = lib
    return libraries


def marked_lines(name: str) -> dict[str, str]:
    """{"read": "serial_sum.cu:25", "write": ...}: the lines the file marks."""
    lines = (GALLERY / f"{name}.cu").read_text().splitlines()
    marks = {}
    for number, line in enumerate(lines, start=1):
        match = re.search(r"// gallery: (read|write)\b", line)
        if match:
            assert match.group(1) not in marks, f"{name}.cu marks two {match.group(1)} lines"
            marks[match.group(1)] = f"{name}.cu:{number}"
    return marks


def run(name: str, correct: bool, schedule: str) -> tuple[int, str]:
    lib = gallery_libraries()[name]
    set_schedule(lib, schedule)
    rc = lib.gallery_run(int(correct))
    message = ctypes.create_string_buffer(8192)
    lib.simt_last_error_message(message, len(message))
    return rc, message.value.decode()


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_gallery_bug_is_reported_with_its_kernel_and_lines(name, kind, generator):
    buggy, _ = KERNELS[name]
    marks = marked_lines(name)
    assert "read" in marks, f"{name}.cu marks no read line"
    for schedule in schedules(kind, generator):
        rc, message = run(name, False, schedule)
        assert rc != 0, f"{name} [{schedule}]: the bug went unreported (rc {rc})"
        assert f"in {buggy}" in message, f"[{schedule}] {message}"
        assert marks["read"] in message, f"[{schedule}] {message}"
        if "data race" in message:
            assert marks["write"] in message, f"[{schedule}] {message}"
            assert message.count("thread (") == 2, message  # both threads, each with its block
        else:
            assert "read of uninitialised shared memory" in message, f"[{schedule}] {message}"


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_correct_twin_passes(name, kind, generator):
    for schedule in schedules(kind, generator):
        rc, message = run(name, True, schedule)
        assert rc == 0, f"{KERNELS[name][1]} [{schedule}]: rc {rc}: {message or 'wrong values'}"
        assert message == ""


def test_a_race_report_names_block_threads_buffer_and_both_lines():
    rc, message = run("serial_sum", False, "round_robin")
    marks = marked_lines("serial_sum")
    # Round-robin: thread 0 writes the total, then thread 1 of the same block reads it.
    assert rc == 719, message  # cudaErrorLaunchFailure
    assert message.startswith("data race in serial_sum_read_without_barrier on shared memory at 0x"), message
    assert "(__shared__ total, byte 0)" in message, message
    assert f"write by thread (0,0,0) [warp 0 lane 0] of block (0,0,0) at {marks['write']}" in message, message
    assert f"read by thread (1,0,0) [warp 0 lane 1] of block (0,0,0) at {marks['read']}" in message, message


def test_a_global_race_between_blocks_names_the_kernel_argument():
    rc, message = run("last_block", False, "round_robin")
    marks = marked_lines("last_block")
    assert rc == 719, message
    # Block 3 takes the last ticket and reads block 0's partial: argument 1 is `partials`.
    assert "on global memory at 0x" in message and "(global memory, byte 0 of kernel argument 1)" in message, message
    assert f"write by thread (0,0,0) [warp 0 lane 0] of block (0,0,0) at {marks['write']}" in message, message
    assert f"read by thread (0,0,0) [warp 0 lane 0] of block (3,0,0) at {marks['read']}" in message, message
