"""The images' recipes without building them (`make test-containers` builds and runs them): one version set
across pyproject.toml, the images and the host; each image installs exactly its stages' extras; a configurable
base; the commit recorded where there is no git; the build context small; the comparison of outputs strict."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from packaging.requirements import Requirement

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "containers"))
import compare  # noqa: E402
from mcgrpo.core import store  # noqa: E402

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Each pin set and the extras its image (or the host) installs on top of the base dependencies.
SETS = {"containers/analysis/requirements.txt": (),
        "containers/train/requirements-cpu.txt": ("train",),
        "containers/train/requirements.txt": ("train", "vllm")}


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(req).name).lower()


def pins(path: str) -> dict[str, str]:
    """name -> pinned version of a requirements file, following its -r includes."""
    file, found = ROOT / path, {}
    for line in file.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found |= pins(str((file.parent / line[3:].strip()).resolve().relative_to(ROOT)))
        elif line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path}: {line} is not a pin"
            found[_name(line)] = spec.version
    return found


def declared(extras: tuple[str, ...]) -> dict[str, Requirement]:
    reqs = [*PROJECT["dependencies"], *(r for e in extras for r in PROJECT["optional-dependencies"][e])]
    return {_name(r): Requirement(r) for r in reqs}


@pytest.mark.parametrize("path", SETS)
def test_each_pin_set_is_exactly_its_images_dependencies_and_satisfies_pyproject(path):
    pinned, wanted = pins(path), declared(SETS[path])
    assert set(pinned) == set(wanted), f"{path} pins {sorted(pinned)}; pyproject.toml asks for {sorted(wanted)}"
    wrong = [f"{n}=={v} (pyproject.toml: {wanted[n]})" for n, v in pinned.items() if v not in wanted[n].specifier]
    assert not wrong, f"{path}: {wrong}"


def test_the_sets_agree_where_vllm_does_not_dictate():
    analysis, cpu, cuda = (pins(p) for p in SETS)
    assert all(cpu[n] == v for n, v in analysis.items()), "the CPU train set includes the analysis set"
    differ = {n for n in cpu.keys() & cuda.keys() if cpu[n] != cuda[n]}
    assert differ <= {"torch", "transformers", "numpy"}, differ  # vLLM pins torch, caps transformers and numpy


def test_the_analysis_image_has_neither_torch_nor_transformers():
    assert not {"torch", "transformers", "tokenizers"} & set(pins("containers/analysis/requirements.txt"))


def test_the_host_installs_with_the_cpu_images_pins():
    make = (ROOT / "Makefile").read_text()
    assert "HOST_PINS := containers/train/requirements-cpu.txt" in make
    assert "pip install --quiet -e '.[train,workflow,test,tracking,docs]' -c $(HOST_PINS)" in make


def test_tracking_is_a_host_extra_the_images_never_install():
    """A study's tracking needs TensorBoard or W&B where it trains; the images (40 minutes to rebuild) stay as
    they are (tests/test_architecture.py: no module imports either library until a run asks for it)."""
    assert {_name(r) for r in PROJECT["optional-dependencies"]["tracking"]} == {"tensorboard", "wandb"}
    for path in SETS:
        assert not {"tensorboard", "wandb"} & set(pins(path)), path
    for image in ("analysis", "train"):
        assert "tracking" not in (ROOT / "containers" / image / "Dockerfile").read_text()


def test_docs_is_a_host_extra_the_images_never_install():
    """`make docs` needs mkdocs where the manual is built (the host, CI); no image runs it."""
    assert {_name(r) for r in PROJECT["optional-dependencies"]["docs"]} == {"mkdocs", "mkdocs-material"}
    for path in SETS:
        assert not {"mkdocs", "mkdocs-material"} & set(pins(path)), path
    for image in ("analysis", "train"):
        assert "docs" not in (ROOT / "containers" / image / "Dockerfile").read_text()


@pytest.mark.parametrize("image", ["analysis", "train"])
def test_dockerfiles_take_a_base_and_a_commit_and_install_normally(image):
    text = (ROOT / "containers" / image / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+\nFROM \$\{BASE_IMAGE\}$", text, re.M)
    assert "ARG GIT_SHA" in text and "MCGRPO_GIT_SHA=${GIT_SHA}" in text
    assert "pip check" in text and "/opt/venv" in text and " -e " not in text


def test_the_build_context_leaves_venvs_and_results_out():
    rules = [r for r in (ROOT / ".dockerignore").read_text().splitlines() if r and not r.startswith("#")]
    assert rules[0] == "*", "everything out, then what the images need back in"
    assert {r[1:] for r in rules if r.startswith("!")} == {"pyproject.toml", "README.md", "workflow/", "containers/"}


def test_git_sha_outside_a_checkout_is_the_images_build_argument(tmp_path):
    shutil.copytree(ROOT / "workflow" / "mcgrpo", tmp_path / "mcgrpo")  # an installed package: no .git around it
    code = "from mcgrpo.core.store import git_sha; print(git_sha())"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    for value, expected in (("abc123", "abc123"), (None, "")):
        run_env = env if value is None else {**env, "MCGRPO_GIT_SHA": value}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env, cwd=tmp_path)
        assert out.stdout.strip() == expected, out.stderr[-2000:]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert store.git_sha() == head  # in a checkout, git's answer wins


def _write(path: Path, df: pd.DataFrame, git_sha: str = "s") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({b"git_sha": git_sha.encode()}), path)
    return path


def test_comparison_sets_aside_timing_columns_only(tmp_path):
    host = _write(tmp_path / "a.parquet", pd.DataFrame({"loss": [0.5, 0.25], "t_generate": [1.0, 2.0],
                                                        "train_seconds": [1.0, 3.0]}))
    slower = _write(tmp_path / "b.parquet", pd.DataFrame({"loss": [0.5, 0.25], "t_generate": [9.0, 9.0],
                                                          "train_seconds": [9.0, 18.0]}))
    off = _write(tmp_path / "c.parquet", pd.DataFrame({"loss": [0.5, 0.25 + 1e-12], "t_generate": [1.0, 2.0],
                                                       "train_seconds": [1.0, 3.0]}))
    other_commit = _write(tmp_path / "d.parquet", pd.read_parquet(host), git_sha="t")
    assert compare.difference(host, slower, timing_aside=True) is None
    assert compare.difference(host, slower) is not None          # analysis outputs: every column counts
    assert compare.difference(host, off, timing_aside=True) is not None  # exact, no tolerance
    assert "metadata" in compare.difference(host, other_commit, timing_aside=True)
    assert compare.difference(host, tmp_path / "missing.parquet") == "missing"
    # A cached host study may be older: then the image's outputs must carry the image's commit.
    assert compare.difference(host, other_commit, git_sha="t") is None
    assert "not the image's" in compare.difference(host, other_commit, git_sha="u")


def test_comparison_of_run_json_sets_aside_clock_and_patch_version_only(tmp_path):
    import json
    run = {"config": {"arm": "outcome"}, "B": 600, "started": "07:00", "ended": "07:01",
           "versions": {"torch": "2.13.0+cpu", "python": "3.11.7"}, "git_sha": "s"}
    (tmp_path / "h").mkdir(), (tmp_path / "o").mkdir()
    (tmp_path / "h" / "run.json").write_text(json.dumps(run))
    later = {**run, "started": "08:00", "ended": "08:02", "versions": {"torch": "2.13.0+cpu", "python": "3.11.2"}}
    (tmp_path / "o" / "run.json").write_text(json.dumps(later))
    assert compare.difference(tmp_path / "h" / "run.json", tmp_path / "o" / "run.json", timing_aside=True) is None
    (tmp_path / "o" / "run.json").write_text(json.dumps({**later, "B": 700}))
    assert compare.difference(tmp_path / "h" / "run.json", tmp_path / "o" / "run.json", timing_aside=True)


def test_comparison_checks_each_side_against_its_manifest(tmp_path):
    """A run file changed after its run finished differs, whatever the other side holds; the manifests compare by
    identity and the files they list (their hashes move with the timing columns of a run trained again)."""
    from mcgrpo.core.manifest import seal
    for side in ("h", "o"):
        (tmp_path / side).mkdir()
        _write(tmp_path / side / "evals.parquet", pd.DataFrame({"loss": [0.5], "train_seconds": [1.0 if side == "h"
                                                                                                  else 2.0]}))
        seal(tmp_path / side, ["evals.parquet"], "run-identity")
    h, o = tmp_path / "h", tmp_path / "o"
    assert compare.difference(h / "manifest.json", o / "manifest.json") is None
    assert compare.difference(h / "evals.parquet", o / "evals.parquet", timing_aside=True) is None
    _write(o / "evals.parquet", pd.DataFrame({"loss": [0.5], "train_seconds": [1.0]}))  # now equal to the host's
    assert "other: " in compare.difference(h / "evals.parquet", o / "evals.parquet")
    assert "sha256 differs" in compare.difference(h / "evals.parquet", o / "evals.parquet")
    assert "sha256 differs" in compare.difference(h / "manifest.json", o / "manifest.json")
