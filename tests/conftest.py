"""Shared fixtures: a small random tiny model, a small arith world, a small validated study config."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import configuration, settings

# `make test` leaves no files in the checkout: hypothesis keeps its caches in a temporary folder.
configuration.set_hypothesis_home_dir(tempfile.mkdtemp(prefix="mcgrpo-hypothesis-"))
# Example counts: `fast` (the default, `make test`) and `all` (`make test-all`: --hypothesis-profile=all). A test that
# needs more than the default asks for a multiple of `settings.default.max_examples`, so both tiers scale it.
settings.register_profile("fast", max_examples=100, deadline=None, database=None, derandomize=True)
settings.register_profile("all", max_examples=2000, deadline=None, database=None, derandomize=True)
settings.load_profile("fast")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))
# What tests/slurm/cluster.sh up writes in the checkout it runs from: the PIDs of the daemons it started.
CLUSTER_PIDS = ROOT / ".cluster" / "pids"

from mcgrpo import studies  # noqa: E402
from mcgrpo import data  # noqa: E402
from mcgrpo.train.models.tiny import build_model, build_tokenizer  # noqa: E402

# Snakemake in a subprocess finds the venv's programs (`python -m mcgrpo`) and this checkout's package.
SNAKEMAKE_ENV = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
                 "PYTHONPATH": str(ROOT / "workflow")}


def snakemake_command(workdir, *args, configfile="study.yaml", snakefile=ROOT / "Snakefile") -> list[str]:
    """`python -m snakemake` on `snakefile` with its outputs (results/, .snakemake/) in `workdir`, never in the
    checkout. `configfile`: a path, a name in `workdir`, or None for the default study (config/config.yaml)."""
    config = [] if configfile is None else ["--configfile", str(Path(workdir) / configfile)]
    # --configfile last: it takes every word up to the next option, which would swallow a target after it
    return [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(workdir), *args, *config]


def snakemake(workdir, *args, configfile="study.yaml", snakefile=ROOT / "Snakefile", env=None,
              timeout=900) -> subprocess.CompletedProcess:
    """Run Snakemake (`snakemake_command`) from the repo root, where its profiles are; output captured."""
    return subprocess.run(snakemake_command(workdir, *args, configfile=configfile, snakefile=snakefile), cwd=ROOT,
                          env=env or SNAKEMAKE_ENV, capture_output=True, text=True, timeout=timeout)


def checkout_copy(dest: Path) -> Path:
    """A copy of this checkout's workflow (Snakefile, rules, profiles, config, its package) at `dest`: another
    checkout, or this one after an update, to run Snakemake from."""
    dest.mkdir(parents=True)
    for part in ("Snakefile", "rules", "profiles", "config", "workflow"):
        source = ROOT / part
        (shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")) if source.is_dir()
         else shutil.copy(source, dest / part))
    return dest


def painted_over(path: Path) -> None:
    """The PNG `path` with one pixel painted over, its text keys (a figure's stamp and seal) kept, as an image editor
    saves it."""
    from PIL import Image, PngImagePlugin
    with Image.open(path) as image:
        text, painted = dict(image.text), image.copy()
    painted.putpixel((5, 5), (255, 0, 0, 255))
    info = PngImagePlugin.PngInfo()
    for key, value in text.items():
        info.add_text(key, value)
    painted.save(path, pnginfo=info)


def read_untimed(path) -> pd.DataFrame:
    """A contrasts or paired table less its rows at equal time (the wall clock of two trainings of a run differs)."""
    table = pd.read_parquet(path)
    return table[table["basis"] != "time"].reset_index(drop=True)


def assert_contrasts_as_alone(programme, alone, study: str) -> None:
    """The study's contrasts and paired tables in the programme's working folder `programme` equal those of the
    study run alone in `alone`, at equal tokens and updates (at equal time, the clock read differs)."""
    for table in ("contrasts", "paired"):
        mine, theirs = (read_untimed(Path(folder) / "results" / study / "analysis" / f"{table}.parquet")
                        for folder in (programme, alone))
        assert len(mine) and set(mine["basis"]) == {"tokens", "updates"}, (study, table)
        pd.testing.assert_frame_equal(mine, theirs, obj=f"{study} {table}")


SMALL_STUDY = {
    "study": "mini",
    "seeds": [1, 2],
    "task": {"seed": 7, "pool": {"size": 64, "levels": [1, 2]},
             "eval_sets": {"heldout": {"size": 6, "levels": [1, 2]}}},
    "model": {"tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                       "max_positions": 96},
              "warm_start": {"steps": 30, "batch_size": 8, "problems": 200}},
    "recipe": {"prompts_per_iteration": 2, "group_size": 4, "completion_limit": 24, "microbatch_size": 3},
    "budget": {"tokens": 600},
    "evaluation": {"samples": 2, "per_budget": 4},
    "arms": {"outcome": {}, "mc_k2": {"credit": {"monte_carlo": {"k": 2}}}},
    "analysis": {"base": "outcome"},
}


def edited_study(**changes) -> dict:
    """A copy of SMALL_STUDY with `block__key=value` changes; a callable value maps the old value to the new."""
    cfg = copy.deepcopy(SMALL_STUDY)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = cfg
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value(node.get(last)) if callable(value) else value
    return cfg


@pytest.fixture
def study() -> dict:
    return studies.validate(copy.deepcopy(SMALL_STUDY))


@pytest.fixture(scope="session")
def world():
    """(pool, eval sets) of the small study."""
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    return data.build(cfg["task"])


@pytest.fixture
def tiny():
    """A freshly initialized (untrained) tiny model and its tokenizer, identical on every call."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                        max_positions=96, seed=0)
    torch.set_num_threads(1)
    return model, tokenizer


@pytest.fixture(scope="session", autouse=True)
def checkout_results_untouched():
    """No test writes into the checkout's results/ (where `make run` puts the default study): each works in a
    temporary folder of its own."""
    def listing():
        return {p: p.lstat().st_mtime_ns for p in (ROOT / "results").rglob("*")} if (ROOT / "results").exists() else {}
    def study_running():  # a developer's `make run` beside the tests holds the checkout's Snakemake lock
        return any((ROOT / ".snakemake" / "locks").glob("*"))
    before, running = listing(), study_running()
    yield
    if running or study_running():
        warnings.warn("results/ not checked: a Snakemake run in this checkout held its lock during the tests")
        return
    assert listing() == before, "a test wrote into the checkout's results/"


def pytest_addoption(parser):
    parser.addoption("--slurm", action="store_true",
                     help="run the SLURM tests (`slurm` marker) against the cluster up on this machine (make test-slurm)")


def own_cluster() -> bool:
    """Whether this checkout's tests/slurm/cluster.sh started the SLURM cluster that runs now: its controller runs
    under the PID the script recorded (.cluster/pids)."""
    try:
        pids = dict(line.split() for line in CLUSTER_PIDS.read_text().splitlines() if line.strip())
        return Path(f"/proc/{int(pids['slurmctld'])}/comm").read_text().strip() == "slurmctld"
    except (OSError, KeyError, ValueError):
        return False


def pytest_collection_modifyitems(config, items):
    """SLURM tests run only when asked (--slurm) or against a cluster this checkout brought up: never against
    daemons someone else started."""
    if config.getoption("--slurm") or own_cluster():
        return
    skip = pytest.mark.skipif(True, reason="SLURM tests run when asked: `make test-slurm` (root; brings up the "
                                           "one-node cluster), `pytest --slurm` with a cluster up, or after this "
                                           "checkout's `tests/slurm/cluster.sh up`")
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(skip, append=False)  # the first reason given; no other condition is evaluated
