"""Stored runs verify themselves (issue 30): each corruption case is refused naming the file and what differs,
and `check-store` names (and with --repair sets aside) the runs to retrain."""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from mcgrpo.analysis import runs
from mcgrpo.cli import main
from mcgrpo.core import layout, manifest, store
from mcgrpo.core.errors import IntegrityError
from test_runs import CORRECT, write_run

KEYS = {1: "a1b2c3d4e5f6", 2: "f6e5d4c3b2a1"}  # the stored runs of seeds 1 and 2


@pytest.fixture
def results(tmp_path):
    """results/ with a run store of two runs, each under its own identity, and a study linking arm a's seeds 1
    and 2 to them (runs/<arm>/seed<N> and runs/store.parquet, as link_study writes them)."""
    root = tmp_path / "results"
    for seed, key in KEYS.items():
        write_run(root / layout.SHARED / "runs" / key, CORRECT, identity=f"identity-of-seed{seed}")
        layout.link(layout.study_run(root / "mini", "a", seed), root / layout.SHARED / "runs" / key)
    store.write_parquet(pd.DataFrame({"arm": ["a", "a"], "seed": [1, 2], "run": [KEYS[1], KEYS[2]],
                                      "calibration": "c"}), root / "mini" / "runs" / "store.parquet")
    return root


def stored(root, seed, name=""):
    return root / layout.SHARED / "runs" / KEYS[seed] / name


def load(root):
    return runs.load(root / "mini", ["a"], [1, 2], ["test"])


def flip_a_bit(path, offset=None):
    """One bit of `path` flipped in place, its size and mtime kept (as a silent disk error leaves it)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[offset if offset is not None else len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size


def test_intact_runs_read_and_a_manifest_lists_every_file_with_its_sha256(results):
    assert len(load(results)) == 2
    sealed = json.loads(stored(results, 1, "manifest.json").read_text())
    assert sealed["run"] == KEYS[1] and sealed["identity"] == "identity-of-seed1"
    assert set(sealed["files"]) == {"evals.parquet", "samples.parquet"}
    assert sealed["files"]["evals.parquet"]["sha256"] == manifest.sha256(stored(results, 1, "evals.parquet"))


def test_a_flipped_bit_with_the_size_unchanged_is_refused_naming_the_file(results):
    flip_a_bit(stored(results, 2, "samples.parquet"))
    with pytest.raises(IntegrityError, match=r"mini/runs/a/seed2/samples.parquet: sha256 differs from manifest.json "
                                             r".*the file changed after the run finished: .*check-store --repair"):
        load(results)


def test_another_runs_files_copied_into_a_run_are_refused_as_another_runs(results):
    for name in ("evals.parquet", "samples.parquet"):
        shutil.copy2(stored(results, 1, name), stored(results, 2, name))
    with pytest.raises(IntegrityError, match=r"seed2/evals.parquet: sha256 differs from manifest.json .* and "
                                             r"config_hash differs: the file belongs to another run \(config_hash "
                                             r"identity-of-, this run's identity-of-\), or changed after"):
        load(results)


def test_a_flipped_bit_inside_the_config_hash_is_not_named_another_runs_file_alone(results):
    """A bit flipped in the metadata's config_hash reads as another run's hash: Parquet has no checksum to tell a
    copied file from a changed one, so the message names both (CI once flipped a byte there)."""
    path = stored(results, 2, "samples.parquet")
    original = path.read_bytes()
    for at in range(len(original) - 1, 0, -1):  # from the footer back: the first flip that still reads, as another hash
        data = bytearray(original)
        data[at] ^= 0x04
        path.write_bytes(bytes(data))
        if (manifest._config_hash(path) or "identity-of-seed2") != "identity-of-seed2":
            break
    else:
        pytest.fail("no flipped bit reads as another config_hash")
    with pytest.raises(IntegrityError, match=r"samples.parquet: sha256 differs from manifest.json .*config_hash "
                                             r"identity-of-, this run's identity-of-\), or changed after the run "
                                             r"finished"):
        load(results)


def test_a_whole_run_folder_copied_over_another_is_refused_by_the_run_it_is_read_as(results):
    shutil.rmtree(stored(results, 2))
    shutil.copytree(stored(results, 1), stored(results, 2))
    with pytest.raises(IntegrityError, match=rf"seed2/manifest.json: belongs to run {KEYS[1]}, not {KEYS[2]}"):
        load(results)


def test_a_truncated_file_is_a_named_error_not_arrows(results, tmp_path):
    path = stored(results, 1, "evals.parquet")
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(IntegrityError, match=r"seed1/evals.parquet: sha256 differs"):
        load(results)
    loose = tmp_path / "loose.parquet"  # a file no manifest vouches for: the store's readers name it too
    loose.write_bytes(path.read_bytes())
    with pytest.raises(IntegrityError, match=r"loose.parquet: not a readable Parquet file, truncated or corrupt "
                                             r"\(ArrowInvalid: .*magic bytes"):
        store.read_parquet(loose)


def test_the_store_reads_the_frame_pandas_reads(tmp_path):
    """The readers open a file once, in one thread (issue 40.5): the frame is still pandas.read_parquet's."""
    df = pd.DataFrame({"s": ["a", None, "c"], "x": [0.1, float("nan"), 3.0], "i": [1, 2, 3], "b": [True, False, True],
                       "t": pd.to_datetime(["2026-12-04T05:00:00Z"] * 3)})
    path = store.write_parquet(df, tmp_path / "f.parquet", "h")
    pd.testing.assert_frame_equal(store.read_parquet(path), pd.read_parquet(path), check_exact=True)
    pd.testing.assert_frame_equal(store.read_parquet(path, ["i"], ["x", "s"]),
                                  pd.read_parquet(path, columns=["x", "s"]), check_exact=True)
    assert store.read_arrow(path, columns=["s"], dictionary=["s"]).column("s").to_pylist() == ["a", None, "c"]


def test_a_run_without_a_manifest_is_refused_saying_what_to_do(results):
    stored(results, 1, "manifest.json").unlink()
    with pytest.raises(IntegrityError, match=r"seed1/manifest.json: missing: the run never finished writing, or was "
                                             r"trained before runs were sealed; .*check-store --repair"):
        load(results)


def test_the_fingerprint_changes_with_a_replaced_file_and_returns_with_the_original_restored_with_cp_p(results):
    """What the analysis rules take as a param: Snakemake reruns them on a change its mtime trigger misses."""
    folders = [stored(results, 1), stored(results, 2)]
    before = manifest.fingerprint(folders)
    path = stored(results, 2, "samples.parquet")
    shutil.copy2(path, results / "original.parquet")
    flip_a_bit(path)
    corrupted = manifest.fingerprint(folders)
    shutil.copy2(results / "original.parquet", path)  # cp -p: the original's bytes and mtime
    assert corrupted != before and manifest.fingerprint(folders) == before
    assert len(load(results)) == 2


def test_check_store_names_the_runs_to_retrain_and_repair_moves_them_aside(results, capsys):
    flip_a_bit(stored(results, 2, "evals.parquet"))
    (results / layout.SHARED / "runs" / "0123456789ab" / "checkpoints").mkdir(parents=True)  # still training
    assert main(["check-store", "--results", str(results)]) == 2
    out, err = capsys.readouterr()
    assert f"BAD {KEYS[2]}:" in out and "evals.parquet: sha256 differs" in out and KEYS[1] not in out
    assert "unfinished 0123456789ab" in out and "1 of 3 stored runs verified" in out
    assert f"1 run(s) to retrain: {KEYS[2]}; rerun with --repair" in err
    assert main(["check-store", "--results", str(results), "--repair"]) == 0
    moved = list((results / layout.SHARED / "quarantine").iterdir())
    assert [p.name[:12] for p in moved] == [KEYS[2]] and (moved[0] / "evals.parquet").exists()
    assert not stored(results, 2).exists() and stored(results, 1).exists()
    assert main(["check-store", "--store", str(results / layout.SHARED / "runs")]) == 0


def test_check_store_names_a_study_link_that_points_at_another_run(results, capsys):
    layout.link(layout.study_run(results / "mini", "a", 2), stored(results, 1))
    assert main(["check-store", "--results", str(results)]) == 2
    assert f"BAD mini/a/seed2:\n  {results}/mini/runs/a/seed2: links to stored run {KEYS[1]}, but" in capsys.readouterr().out


def test_the_contrast_verb_refuses_a_changed_file(results, capsys):
    """`mcgrpo contrast` reads a results folder alone: the same check, exit 2 and the file named."""
    store.write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [100]}),
                        results / "mini" / "calibration" / "budget.parquet")
    layout.link(layout.study_run(results / "mini", "b", 1), stored(results, 2))
    layout.write_index(results / "mini" / "runs" / "store.parquet",
                       {("a", 1): (KEYS[1], "c"), ("a", 2): (KEYS[2], "c"), ("b", 1): (KEYS[2], "c")})
    flip_a_bit(stored(results, 2, "samples.parquet"))
    assert main(["contrast", "--results", str(results / "mini"), "--a", "b", "--b", "a", "--resamples", "10"]) == 2
    assert "seed1/samples.parquet: sha256 differs" in capsys.readouterr().err


def test_a_file_whose_pandas_metadata_was_changed_is_named_not_a_traceback(tmp_path):
    """A byte changed inside the footer's pandas metadata (here: a column's numpy_type gone) fails pyarrow's
    conversion with a KeyError; the reader names the file as corrupt instead (CI once flipped a byte there)."""
    import pyarrow.parquet as pq
    path = store.write_parquet(pd.DataFrame({"a": [1, 2]}), tmp_path / "x.parquet")
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    pandas_meta = json.loads(meta[b"pandas"])
    for column in pandas_meta["columns"]:
        column.pop("numpy_type")
    meta[b"pandas"] = json.dumps(pandas_meta).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
    assert store.read_arrow(path).num_rows == 2  # Arrow itself still reads it
    with pytest.raises(IntegrityError, match=r"x.parquet: not a readable Parquet file, truncated or corrupt "
                                             r"\(KeyError: 'numpy_type'\)"):
        store.read_parquet(path)


def test_a_required_column_that_pandas_metadata_makes_the_index_is_named_not_a_keyerror(tmp_path):
    """pandas' metadata edited to name a column as the frame's index (a calibration's budget.parquet, which no
    manifest vouches for, with B as its index) took the column out of the frame: every analysis step stopped with a
    bare KeyError: 'B' traceback. The reader names the file."""
    import pyarrow.parquet as pq
    path = store.write_parquet(pd.DataFrame({"B": [100], "source": ["config"]}), tmp_path / "budget.parquet")
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"pandas"] = json.dumps({**json.loads(meta[b"pandas"]), "index_columns": ["B"]}).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
    assert list(store.read_parquet(path).columns) == ["source"]  # not required: read as pandas reads it
    with pytest.raises(IntegrityError, match=rf"{path}: pandas' metadata in the file makes required column\(s\) B "
                                             rf"the frame's index, which write_parquet never writes \(edited\); "
                                             rf"allowed: the file as its writer left it"):
        store.read_parquet(path, ["B"])
