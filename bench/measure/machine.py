"""What the machine did while something was timed, besides running it.

* Other processes: on a small machine shared with other work, a 2-thread op
  waits for a core whenever anything else runs: its time then measures the
  neighbours. Each report row records the share of all cores that OTHER
  processes used during its timed loop (/proc/stat busy time minus this
  process's CPU time), so a reader - and `invoke bench.compare` - can tell a slow
  kernel from a busy machine.
* Page faults: a call that allocates a large fresh output makes the kernel
  map (and zero) new 4 KiB pages, and what that costs differs several-fold
  between machines. The minor page faults of this process (all its threads,
  getrusage) over the timed loop say how much of a row's time is the OS's.
* Transparent huge pages: the kernel's mode decides whether such a fresh
  output costs one fault per 4 KiB or per 2 MiB.
* The power policy: a switch to a power-saving governor or preference, or
  boost turned off, slows every row; two reports measured under different
  policies compare the policies. The CPU's (cpufreq) and each GPU's (NVML)
  are recorded, and `invoke bench.compare` refuses reports whose policies differ.
* Which machine: a hash of the machine id, stable across containers.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
_THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
MIN_WINDOW_S = 0.1
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    busy_s: float  # all cores, all processes; NaN where /proc/stat is unavailable
    own_s: float  # this process, all threads
    wall_s: float
    minor_faults: int = 0  # this process, all threads, since it started


def _busy_seconds() -> float:
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return math.nan
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _TICKS


def snapshot() -> CpuSnapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # microsecond resolution, all threads of this process
    return CpuSnapshot(
        busy_s=_busy_seconds(),
        own_s=usage.ru_utime + usage.ru_stime,
        wall_s=time.monotonic(),
        minor_faults=usage.ru_minflt,
    )


def without_pauses(after: CpuSnapshot, paused_s: float, busy_while_paused_s: float) -> CpuSnapshot:
    """``after`` as if the pauses had not happened: their wall time and the CPU used during them taken out.

    A timed loop that hands the CPU to another process in turns (bench/measure/turns.py)
    is not loaded by what that process does in its own turns.
    """
    if paused_s == 0:
        return after
    return replace(after, busy_s=after.busy_s - busy_while_paused_s, wall_s=after.wall_s - paused_s)


def minor_faults(before: CpuSnapshot, after: CpuSnapshot) -> int:
    """Minor page faults this process took between two snapshots (pages mapped without disk I/O)."""
    return after.minor_faults - before.minor_faults


def other_cpu_seconds(before: CpuSnapshot, after: CpuSnapshot) -> float:
    """CPU seconds (all cores) that other processes used between two snapshots; NaN without /proc/stat."""
    if math.isnan(before.busy_s) or math.isnan(after.busy_s):
        return math.nan
    return max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s))


# Other processes above this share of the CPU make a row suspect (reports, summaries and comparisons say so).
BUSY_SHARE = 0.10


def other_cpu_share(others_s: float, wall_s: float, cores: int | None = None) -> float:
    """Fraction (0..1) of all cores' time that other processes used in ``wall_s`` seconds.

    /proc/stat counts in clock ticks (10 ms): windows shorter than MIN_WINDOW_S
    cannot say anything and give NaN.
    """
    cores = cores or os.cpu_count() or 1
    if not wall_s >= MIN_WINDOW_S or math.isnan(others_s):
        return math.nan
    return min(1.0, others_s / (wall_s * cores))


def transparent_huge_pages(thp_dir: Path = _THP_DIR) -> str:
    """The kernel's transparent-huge-page modes, e.g. "enabled=madvise defrag=madvise"; "unknown" without sysfs.

    Each sysfs file lists the choices with the active one in brackets
    ("always [madvise] never"). ``enabled=madvise`` means only memory that asks
    for huge pages (torch with THP_MEM_ALLOC_ENABLE=1) gets them; ``defrag``
    says whether a fault may stall to compact memory into a huge page.
    """
    modes = []
    for name in ("enabled", "defrag"):
        try:
            text = (thp_dir / name).read_text()
        except OSError:
            return "unknown"
        active = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
        modes.append(f"{name}={active[0] if active else 'unknown'}")
    return " ".join(modes)


# --- the machine's identity and power policy ------------------------------------------------

NOT_EXPOSED = "not exposed"
_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
MACHINE_ID_ENV = "FUSEDBENCH_MACHINE_ID"
_CPU_DIR = Path("/sys/devices/system/cpu")


def machine_id(files: tuple[Path, ...] = _MACHINE_ID_FILES) -> str:
    """A stable name of this machine: a hash of its machine id (never the id itself), or "unknown".

    The hostname is no such name: each `docker run` gets a random one. The
    machine id stays with the installed system; `invoke docker.run` mounts the
    host's into the container, so containers on one host share it.
    $FUSEDBENCH_MACHINE_ID, when set, is taken as it is.
    """
    if given := os.environ.get(MACHINE_ID_ENV, "").strip():
        return given
    for path in files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text:
            return hashlib.sha256(text.encode()).hexdigest()[:16]
    return "unknown"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _joined(values: list[str | None]) -> str:
    """The distinct values over the CPU's frequency policies, or NOT_EXPOSED when none has the file."""
    found = sorted({v for v in values if v})
    return ",".join(found) if found else NOT_EXPOSED


def _mhz(khz: str | None) -> str | None:
    return f"{int(khz) // 1000}" if khz and khz.isdigit() else None


@dataclass(frozen=True)
class CpuPower:
    """The CPU's power policy (cpufreq sysfs; intel_pstate and amd_pstate), each NOT_EXPOSED where hidden."""

    governor: str
    epp: str  # energy_performance_preference
    boost: str  # on | off | NOT_EXPOSED
    freq_range_mhz: str  # "min-max" of the policy's scaling limits
    cur_mhz: str  # at the time of reading: a state, not a policy

    def columns(self) -> dict[str, str]:
        return {
            "cpu_governor": self.governor,
            "cpu_epp": self.epp,
            "cpu_boost": self.boost,
            "cpu_freq_range_mhz": self.freq_range_mhz,
            "cpu_cur_mhz": self.cur_mhz,
        }


def cpu_power(cpu_dir: Path = _CPU_DIR) -> CpuPower:
    """What the kernel exposes of the CPU's frequency policy; a VM without cpufreq gives NOT_EXPOSED everywhere."""
    policies = sorted((cpu_dir / "cpufreq").glob("policy*")) or sorted(cpu_dir.glob("cpu[0-9]*/cpufreq"))
    ranges = []
    for policy in policies:
        low, high = _mhz(_read(policy / "scaling_min_freq")), _mhz(_read(policy / "scaling_max_freq"))
        ranges.append(f"{low}-{high}" if low and high else None)
    return CpuPower(
        governor=_joined([_read(p / "scaling_governor") for p in policies]),
        epp=_joined([_read(p / "energy_performance_preference") for p in policies]),
        boost=_boost(cpu_dir),
        freq_range_mhz=_joined(ranges),
        cur_mhz=_joined([_mhz(_read(p / "scaling_cur_freq")) for p in policies]),
    )


def _boost(cpu_dir: Path) -> str:
    # acpi-cpufreq and amd_pstate: cpufreq/boost (1 on); intel_pstate: intel_pstate/no_turbo (1 off).
    boost = _read(cpu_dir / "cpufreq" / "boost")
    if boost in ("0", "1"):
        return "on" if boost == "1" else "off"
    no_turbo = _read(cpu_dir / "intel_pstate" / "no_turbo")
    if no_turbo in ("0", "1"):
        return "off" if no_turbo == "1" else "on"
    return NOT_EXPOSED


def gpu_columns(device: str) -> dict[str, str]:
    """``gpu_policy`` (application clocks, power limit, persistence, compute mode, ECC: compared) and
    ``gpu_clocks`` (SM and memory clocks when read: recorded) of the GPU named ``device``; empty for the CPU.

    Read through NVML (nvidia-ml-py, in the CUDA variant only), imported here so
    the CPU variant never needs it.
    """
    if device == "cpu":
        return {"gpu_policy": "", "gpu_clocks": ""}
    return _nvml_columns(device)


@functools.cache
def _nvml_columns(device: str) -> dict[str, str]:
    try:
        import pynvml
    except ImportError:
        reason = f"{NOT_EXPOSED} (nvidia-ml-py not installed)"
        return {"gpu_policy": reason, "gpu_clocks": reason}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        reason = f"{NOT_EXPOSED} (NVML: {error})"
        return {"gpu_policy": reason, "gpu_clocks": reason}
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        named = [h for h in handles if _nvml(pynvml.nvmlDeviceGetName, h) == device] or handles[:1]
        if not named:
            reason = f"{NOT_EXPOSED} (NVML sees no GPU)"
            return {"gpu_policy": reason, "gpu_clocks": reason}
        handle, clock = named[0], pynvml
        policy = {
            "app_sm_mhz": _nvml(pynvml.nvmlDeviceGetApplicationsClock, handle, clock.NVML_CLOCK_SM),
            "app_mem_mhz": _nvml(pynvml.nvmlDeviceGetApplicationsClock, handle, clock.NVML_CLOCK_MEM),
            "power_limit_w": _watts(_nvml(pynvml.nvmlDeviceGetPowerManagementLimit, handle)),
            "persistence": _on_off(_nvml(pynvml.nvmlDeviceGetPersistenceMode, handle)),
            "compute_mode": _nvml(pynvml.nvmlDeviceGetComputeMode, handle),
            "ecc": _on_off(_first(_nvml(pynvml.nvmlDeviceGetEccMode, handle))),
        }
        clocks = {
            "sm_mhz": _nvml(pynvml.nvmlDeviceGetClockInfo, handle, clock.NVML_CLOCK_SM),
            "mem_mhz": _nvml(pynvml.nvmlDeviceGetClockInfo, handle, clock.NVML_CLOCK_MEM),
        }
    finally:
        pynvml.nvmlShutdown()
    return {"gpu_policy": _pairs(policy), "gpu_clocks": _pairs(clocks)}


def _nvml(function, *args):
    import pynvml

    try:
        value = function(*args)
    except pynvml.NVMLError:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _first(value):
    return value[0] if isinstance(value, list | tuple) else value


def _watts(milliwatts) -> str | None:
    return None if milliwatts is None else f"{milliwatts / 1000:g}"


def _on_off(value) -> str | None:
    return None if value is None else ("on" if int(value) else "off")


def _pairs(values: dict[str, object]) -> str:
    return " ".join(f"{k}={NOT_EXPOSED.replace(' ', '_') if v is None else v}" for k, v in values.items())
