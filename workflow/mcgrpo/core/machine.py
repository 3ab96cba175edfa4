"""What a run was timed on, in words a reader recognizes: the CPU's model name, not the architecture."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name ('AMD EPYC 7B13' from Linux's /proc/cpuinfo), else what the platform module says
    (platform.processor() is only the architecture on Linux, hence /proc/cpuinfo first)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
