"""The SIMT emulator (csrc/emu) against CUDA's documented semantics, through
one kernel that calls each intrinsic (csrc/emu/simt_selftest.cu): shuffles
with widths, edges and sub-warp masks, votes, counting barriers, atomics and
the built-in variables of 2-D blocks and grids, and threads that exit before
votes and barriers (they no longer count, as since Volta), in every scheduling order.
The expected values are computed here from the CUDA programming guide's
definitions, independently of the emulator.
"""

from __future__ import annotations

import ctypes

import pytest
import torch

from tests.helpers.emulated_kernels import SCHEDULE_KINDS, schedules, set_schedule

pytestmark = pytest.mark.cuda_emulated

FIELDS = 13
BLOCK = (16, 4)  # 64 threads: two warps, each spanning two rows of threadIdx.y
GRID = (3, 2)


@pytest.fixture(scope="module")
def selftest():
    from env.builder.cuda_emulation import EmulationBuildError, build_emulator_selftest

    try:
        lib = ctypes.CDLL(str(build_emulator_selftest()))
    except EmulationBuildError as error:
        pytest.skip(str(error))
    lib.simt_selftest.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    lib.simt_selftest_exits.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int]
    lib.simt_last_error_message.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def expected_fields(values: list[int]) -> list[list[int]]:
    """What each thread must record, from the definitions of the intrinsics."""
    threads = BLOCK[0] * BLOCK[1]
    out = []
    for b in range(GRID[0] * GRID[1]):
        block = values[b * threads : (b + 1) * threads]
        bx, by = b % GRID[0], b // GRID[0]
        for t, v in enumerate(block):
            lane, warp = t % 32, block[t - t % 32 : t - t % 32 + 32]
            ballot = sum(1 << i for i, w in enumerate(warp) if w & 1)
            out.append(
                [
                    warp[(lane * 7) % 32],  # __shfl_sync from any lane
                    warp[(lane & ~7) + 3],  # width 8: lane 3 of its own segment
                    warp[lane + 5] if lane + 5 < 32 else v,  # down past the end: own value
                    warp[lane - 3] if lane % 16 >= 3 else v,  # up, width 16
                    warp[lane ^ 9],
                    ballot - (1 << 32) if ballot >= 1 << 31 else ballot,  # as a signed int
                    any(w % 10 == 7 for w in warp) + 2 * all(w >= 50 for w in warp),
                    sum(w & 1 for w in block),  # __syncthreads_count
                    any(w % 100 == 7 for w in block) + 2 * all(w >= 50 for w in block),
                    warp[lane ^ 1],  # within its half-warp mask
                    bx * 1000 + by * 100 + (t % BLOCK[0]) * 10 + t // BLOCK[0],
                    GRID[0] * 1000 + GRID[1] * 100 + BLOCK[0] * 10 + BLOCK[1],
                    warp[lane ^ 8] if (lane ^ 8) <= (lane | 7) else v,  # xor, width 8: earlier segments only
                ]
            )
    return out


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_intrinsics_follow_cuda_semantics(selftest, generator, kind):
    n = BLOCK[0] * BLOCK[1] * GRID[0] * GRID[1]
    for order in schedules(kind, generator):
        values = torch.randint(0, 1000, (n,), dtype=torch.int32, generator=generator)
        out = torch.full((n, FIELDS), -1, dtype=torch.int32)
        total = torch.zeros(1, dtype=torch.int32)
        set_schedule(selftest, order)
        rc = selftest.simt_selftest(values.data_ptr(), out.data_ptr(), total.data_ptr(), *BLOCK, *GRID)
        message = ctypes.create_string_buffer(2048)
        selftest.simt_last_error_message(message, len(message))
        assert rc == 0, f"[{order}] {message.value.decode()}"
        expected = expected_fields(values.tolist())
        for g, (got, want) in enumerate(zip(out.tolist(), expected, strict=True)):
            assert got == want, f"[{order}] thread {g} (block {g // 64}, t {g % 64}): got {got}, expected {want}"
        assert int(total) == int(values.sum())  # every thread's atomicAdd landed once


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_exited_threads_do_not_count_at_votes_or_barriers(selftest, generator, kind):
    threads = 80  # two full warps and a partial one
    for order in schedules(kind, generator):
        values = torch.randint(0, 1000, (threads,), dtype=torch.int32, generator=generator)
        values[32:64] = 50 + values[32:64] % 950  # one warp whose live lanes all vote true
        out = torch.full((threads, 4), -1, dtype=torch.int32)
        set_schedule(selftest, order)
        rc = selftest.simt_selftest_exits(values.data_ptr(), out.data_ptr(), threads)
        message = ctypes.create_string_buffer(2048)
        selftest.simt_last_error_message(message, len(message))
        assert rc == 0, f"[{order}] {message.value.decode()}"  # no deadlock at the barriers
        v = values.tolist()
        live = [t for t in range(threads) if t % 3 != 0]
        for t in range(threads):
            if t % 3 == 0:
                assert out[t].tolist() == [-1] * 4, t  # exited before writing
                continue
            warp = [u for u in live if u // 32 == t // 32]
            assert out[t].tolist() == [
                all(v[u] >= 50 for u in warp),
                any(v[u] % 10 == 7 for u in warp),
                sum(v[u] & 1 for u in live),
                all(v[u] >= 50 for u in live),
            ], f"[{order}] thread {t}"


def test_a_block_of_more_than_1024_threads_is_refused(selftest):
    values = torch.zeros(33 * 32, dtype=torch.int32)
    out = torch.zeros(33 * 32, FIELDS, dtype=torch.int32)
    total = torch.zeros(1, dtype=torch.int32)
    set_schedule(selftest, "round_robin")
    rc = selftest.simt_selftest(values.data_ptr(), out.data_ptr(), total.data_ptr(), 33, 32, 1, 1)
    assert rc == 9  # cudaErrorInvalidConfiguration, as the CUDA runtime reports it
    message = ctypes.create_string_buffer(1024)
    selftest.simt_last_error_message(message, len(message))
    assert b"intrinsics_kernel launched with grid (1,1,1) and block (33,32,1)" in message.value
    assert not out.any() and int(total) == 0  # nothing ran
