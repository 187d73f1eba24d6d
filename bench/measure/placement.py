"""Where a process's input buffers start within a 4 KiB page, set per process.

Two buffers whose addresses agree in their low 12 bits alias in the CPU's
store-to-load forwarding (4 KiB aliasing); where the allocator puts them is
fixed for the life of a process and differs between processes. Measured in one
process, that layout is frozen into every sample and reads as an effect of the
code (seen: every ORT row at 1x8x512 1.26-1.47x apart between two processes of
identical code). The A/B driver gives each process another offset, so the
layouts are spread over the processes and average out instead.
"""

from __future__ import annotations

import math

import torch

PAGE_BYTES = 4096

# The layouts a report names (its `layout` column). NATURAL: every buffer as torch's allocator gives it, as a
# user's tensors and a model's own get them (from 4 MiB on each is its own mapping, so x, y, weight and bias
# start at one offset into their pages). PAGE_OFFSET: x (and the residual) copied to start at the process's
# page offset (set_page_offset); a run gives each process another offset, so that layout's bias is spread over
# the processes instead of frozen into one.
NATURAL = "natural"
PAGE_OFFSET = "page_offset"
LAYOUTS = (NATURAL, PAGE_OFFSET)
ALIGNMENT = 64  # torch's CPU allocator aligns to 64 bytes; offsets keep that alignment (vector loads)

_offset_bytes = 0


def set_page_offset(nbytes: int) -> None:
    """Place the inputs made from now on ``nbytes`` into a page (0 <= nbytes < 4096, a multiple of 64)."""
    global _offset_bytes
    if not (isinstance(nbytes, int) and 0 <= nbytes < PAGE_BYTES and nbytes % ALIGNMENT == 0):
        raise ValueError(f"page offset must be an int multiple of {ALIGNMENT} in [0, {PAGE_BYTES}), got {nbytes!r}")
    _offset_bytes = nbytes


def page_offset() -> int:
    return _offset_bytes


def spread_offsets(count: int) -> list[int]:
    """``count`` offsets spread evenly over a page (multiples of ALIGNMENT), one per process."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    slots = PAGE_BYTES // ALIGNMENT
    return [(index * slots // count) * ALIGNMENT for index in range(count)]


def empty_at(shape: tuple[int, ...], dtype: torch.dtype, offset: int) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor whose first byte sits ``offset`` bytes into a 4 KiB page."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if not (isinstance(offset, int) and 0 <= offset < PAGE_BYTES and offset % itemsize == 0):
        raise ValueError(f"offset must be an int multiple of {itemsize} in [0, {PAGE_BYTES}), got {offset!r}")
    numel = math.prod(shape)
    buffer = torch.empty(numel + PAGE_BYTES // itemsize, dtype=dtype)
    start = ((offset - buffer.data_ptr()) % PAGE_BYTES) // itemsize
    return buffer[start : start + numel].view(shape)


def in_layout(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor`` as an input of ``layout``: as it is (NATURAL), or placed at the process's offset (PAGE_OFFSET)."""
    if layout == NATURAL:
        return tensor
    if layout == PAGE_OFFSET:
        return placed(tensor)
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def layout_of(tensor: torch.Tensor) -> str:
    """The layout ``placed`` gives ``tensor``: only CPU tensors are moved."""
    return PAGE_OFFSET if tensor.device.type == "cpu" else NATURAL


def placed(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy of ``tensor`` starting at the set offset into a page; other tensors as they are."""
    if tensor.device.type != "cpu":
        return tensor
    view = empty_at(tuple(tensor.shape), tensor.dtype, _offset_bytes)
    view.copy_(tensor)
    return view.requires_grad_(tensor.requires_grad)
