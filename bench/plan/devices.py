"""Which devices a run measures, and the name each one has in the report.

``--device cpu|cuda|all`` (or a comma list): ``all`` is every device present.
Asking for CUDA where torch sees none is an error that says why, so a GPU run
that silently measured the CPU can never happen.
"""

from __future__ import annotations

import torch

DEVICES = ("cpu", "cuda")


class DeviceUnavailable(ValueError):
    """A device was asked for that this machine does not have (the message says why and what to do)."""


def cuda_missing_reason() -> str | None:
    """None when torch can run on a CUDA device here, else why it cannot."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"no CUDA device is present: this torch ({torch.__version__}) is a CPU-only build"
    return (
        f"no CUDA device is present: torch {torch.__version__} (CUDA {torch.version.cuda}) finds no GPU "
        "(no device, or no working driver: see nvidia-smi)"
    )


def present_devices() -> list[str]:
    return [d for d in DEVICES if d == "cpu" or cuda_missing_reason() is None]


def resolve_devices(spec: str) -> list[str]:
    """``all`` -> every device present; ``cpu``, ``cuda`` or a comma list -> those (each must be present)."""
    names = list(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    if names == ["all"]:
        return present_devices()
    unknown = [n for n in names if n not in DEVICES]
    if not names or unknown:
        raise ValueError(f"--device must be one of {list(DEVICES)}, a comma list of them, or 'all'; got {spec!r}")
    if "cuda" in names and (reason := cuda_missing_reason()) is not None:
        raise DeviceUnavailable(f"{reason} - run with --device cpu, or on a machine with a GPU")
    return [d for d in DEVICES if d in names]


def device_label(device: str) -> str:
    """What the report's ``device`` column holds: ``cpu``, or the GPU's name (``NVIDIA H100 80GB HBM3``)."""
    return torch.cuda.get_device_name(torch.device(device)) if device != "cpu" else "cpu"
