"""Optional experiment tracking: the rows the trainer logs (one per iteration, one per evaluation and set)
sent as they happen to TensorBoard or to Weights & Biases in offline mode (nothing leaves the machine;
`wandb sync` uploads a run later, where a network is).

Off by default (the study's `tracking: none`). Each library is imported only when a run asks for it, so
neither is a dependency of any stage (`pip install '.[tracking]'`). Rows are logged after the stage clock
has stopped and draw no random numbers, so a tracked run trains the same numbers as an untracked one.
Logs go to `<run folder>/tracking/`, which no rule declares as an output: Snakemake never deletes them,
and they never make a job out of date. The step of every scalar is the run's generated tokens so far,
the x axis on which arms are compared.
"""

from __future__ import annotations

import importlib
import os
from numbers import Real
from pathlib import Path
from typing import Protocol

import numpy as np

from mcgrpo.core.errors import ConfigError

BACKENDS = ("none", "tensorboard", "wandb")  # as the schema's `tracking` enum
FOLDER = "tracking"


class Tracker(Protocol):
    def log(self, kind: str, row: dict, step: int) -> None:
        """Every number of `row` as a scalar `<kind>/<column>` at `step`."""

    def close(self) -> None:
        """Flush and close the log."""


def scalars(kind: str, row: dict) -> dict[str, float]:
    """The row's numbers (flags as 0/1) under `<kind>/<column>`; text columns (the eval set's name) left out."""
    return {f"{kind}/{k}": float(v) for k, v in row.items() if isinstance(v, (Real, np.bool_))}


def _library(module: str, package: str, backend: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"config key tracking: {backend!r} needs the {package} package, which this environment "
                          f"lacks ({e}); allowed: install it (pip install '.[tracking]', as `make env` does), "
                          f"or tracking: none") from None


class TensorBoard:
    """Event files that `tensorboard --logdir results/<study>/runs` shows, one TensorBoard run per training run.

    The writer opens at the first row, with that row's step as `purge_step`: a resumed attempt's first row
    hides whatever an earlier attempt logged at or past it (the iterations it did after its last
    checkpoint, which this attempt redoes), and a run trained again from scratch hides the old run. The
    earlier event files themselves are kept.
    """

    def __init__(self, folder: Path):
        self._writer_class = _library("torch.utils.tensorboard", "tensorboard", "tensorboard").SummaryWriter
        self.folder, self.writer = folder, None

    def log(self, kind: str, row: dict, step: int) -> None:
        if self.writer is None:
            self.writer = self._writer_class(log_dir=str(self.folder), purge_step=step)
        for tag, value in scalars(kind, row).items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class WandB:
    """An offline W&B run per attempt (W&B resumes no offline run) under `tracking/wandb/`, grouped by study
    and arm, with the run's effective config. Offline whatever WANDB_MODE says, with W&B's own error reports
    off, so that nothing is ever sent; the system-metrics sampler, console capture, git and pip probes are off
    too (they would cost the trainer's cores and add nothing a run's Parquet lacks)."""

    def __init__(self, folder: Path, run: dict, study: str, arm: str):
        self.wandb = _library("wandb", "wandb", "wandb")
        self.folder, self.config, self.run, self.study, self.arm = folder, run, None, study, arm

    def _start(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        os.environ["WANDB_ERROR_REPORTING"] = "false"
        settings = self.wandb.Settings(mode="offline", silent=True, console="off", x_disable_stats=True,
                                       x_disable_machine_info=True, x_disable_meta=True, disable_git=True,
                                       disable_code=True, save_code=False, x_save_requirements=False,
                                       disable_job_creation=True)
        return self.wandb.init(dir=str(self.folder), project=self.study, group=self.arm,
                               name=f"{self.arm}-seed{self.config['seed']}", job_type="train",
                               config=self.config, settings=settings)

    def log(self, kind: str, row: dict, step: int) -> None:
        if self.run is None:
            self.run = self._start()
        self.run.log(scalars(kind, row), step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.wandb.teardown()  # stop the wandb-core process now, not at interpreter exit


def open_tracker(backend: str, run_folder: str | Path, run: dict, study: str = "run",
                 arm: str = "run") -> Tracker | None:
    """The tracker `backend` names, logging into `<run_folder>/tracking/`, the run named by its study and arm;
    None for `none`."""
    if backend not in BACKENDS:
        raise ConfigError(f"config key tracking: {backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    folder = Path(run_folder) / FOLDER
    if backend == "tensorboard":
        return TensorBoard(folder)
    if backend == "wandb":
        return WandB(folder, run, study, arm)
    return None
