"""The race detector and the schedules against a gallery of wrong kernels
(tests/csrc/race_gallery/*.cu), each beside its correct twin.

Each gallery file holds one bug of a class an emulator can let pass (a
serial sum read without a second barrier, a shared exchange without
__syncwarp, a warp overwriting a slot a slower warp still reads, an
inter-block flag without a fence, a read of an unwritten shared slot, a read
of a slot whose thread returned early, a write placed after the fence that
should order it, a vote or shuffles standing in for __syncwarp, and a
__syncthreads() in each branch of an if). The buggy kernel must be reported
in every schedule, naming the kernel and the lines the file marks with
``// gallery: read`` / ``// gallery: write`` (a race) or the two lines it
marks ``// gallery: barrier`` (barriers at different lines); the twin must
run and compute the right values in every schedule, with the detector on.
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
    "write_after_fence": ("partial_written_after_fence", "partial_written_before_fence"),
    "vote_as_barrier": ("exchange_across_a_vote", "exchange_across_a_syncwarp"),
    "shuffle_as_barrier": ("first_read_across_shuffles", "first_read_after_syncwarp"),
    "split_barrier": ("barrier_in_each_branch", "barrier_after_the_branches"),
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


def marked_lines(name: str) -> dict[str, list[str]]:
    """{"read": ["serial_sum.cu:25"], "write": [...], "barrier": [...]}: the lines the file marks."""
    lines = (GALLERY / f"{name}.cu").read_text().splitlines()
    marks: dict[str, list[str]] = {}
    for number, line in enumerate(lines, start=1):
        match = re.search(r"// gallery: (read|write|barrier)\b", line)
        if match:
            marks.setdefault(match.group(1), []).append(f"{name}.cu:{number}")
    assert all(len(marks[k]) == 1 for k in ("read", "write") if k in marks), f"{name}.cu marks a line kind twice"
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
    assert "read" in marks or len(marks.get("barrier", [])) == 2, f"{name}.cu marks no read line, nor two barriers"
    for schedule in schedules(kind, generator):
        rc, message = run(name, False, schedule)
        assert rc != 0, f"{name} [{schedule}]: the bug went unreported (rc {rc})"
        if "barrier" in marks:
            # Both barriers are named, whichever the threads reached first.
            assert message.startswith(f"barriers at different lines in {buggy}, block ("), f"[{schedule}] {message}"
            assert all(f"__syncthreads() at {line}" in message for line in marks["barrier"]), f"[{schedule}] {message}"
            continue
        assert f"in {buggy}" in message, f"[{schedule}] {message}"
        (read,) = marks["read"]
        assert read in message, f"[{schedule}] {message}"
        if "data race" in message:
            (write,) = marks["write"]
            assert write in message, f"[{schedule}] {message}"
            assert message.count("thread (") == 2, message  # both threads, each with its block
            assert "simt.h" not in message, message  # the kernel's lines, not the emulator's helpers'
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
    marks = {kind: line for kind, (line,) in marked_lines("serial_sum").items()}
    # Round-robin: thread 0 writes the total, then thread 1 of the same block reads it.
    assert rc == 719, message  # cudaErrorLaunchFailure
    assert message.startswith("data race in serial_sum_read_without_barrier on shared memory at 0x"), message
    assert "(__shared__ total, byte 0)" in message, message
    assert f"write by thread (0,0,0) [warp 0 lane 0] of block (0,0,0) at {marks['write']}" in message, message
    assert f"read by thread (1,0,0) [warp 0 lane 1] of block (0,0,0) at {marks['read']}" in message, message


def test_a_global_race_between_blocks_names_the_kernel_argument():
    rc, message = run("last_block", False, "round_robin")
    marks = {kind: line for kind, (line,) in marked_lines("last_block").items()}
    assert rc == 719, message
    # Block 3 takes the last ticket and reads block 0's partial: argument 1 is `partials`.
    assert "on global memory at 0x" in message and "(global memory, byte 0 of kernel argument 1)" in message, message
    assert f"write by thread (0,0,0) [warp 0 lane 0] of block (0,0,0) at {marks['write']}" in message, message
    assert f"read by thread (0,0,0) [warp 0 lane 0] of block (3,0,0) at {marks['read']}" in message, message


def test_a_write_after_the_fence_is_not_released_by_the_ticket():
    # Round-robin: block 0 writes its partial after its fence; block 3 takes the last ticket and reads it. The
    # ticket releases only what block 0 did before the fence, so the read is not ordered after the write.
    rc, message = run("write_after_fence", False, "round_robin")
    marks = {kind: line for kind, (line,) in marked_lines("write_after_fence").items()}
    assert rc == 719, message
    assert message.startswith("data race in partial_written_after_fence on global memory at 0x"), message
    assert f"write by thread (0,0,0) [warp 0 lane 0] of block (0,0,0) at {marks['write']}" in message, message
    assert f"read by thread (0,0,0) [warp 0 lane 0] of block (3,0,0) at {marks['read']}" in message, message
