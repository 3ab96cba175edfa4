"""The images' recipes without building them (`make test-containers` builds and runs them): one version set
across pyproject.toml, the images and the host; each image installs exactly its stages' extras; a configurable
base; the commit recorded where there is no git; the build context small; the comparison of outputs strict."""

from __future__ import annotations

import os
import re
import shlex
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
import layers  # noqa: E402
import pip_secrets  # noqa: E402
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
        text = (ROOT / "containers" / image / "Dockerfile").read_text()
        assert "docs" not in re.sub(r"docs/\S+\.md", "", text)  # a link to the manual is no extra


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


def test_comparison_goes_both_ways_and_takes_two_files(tmp_path, capsys):
    """A file the image wrote that the host did not is a difference too; two files (a summary) compare alone."""
    h, o = tmp_path / "h", tmp_path / "o"
    for side in (h, o):
        (side / "tables").mkdir(parents=True)
        (side / "tables" / "t.md").write_text("| a |\n")
        (side / "tables" / "table.log").write_text(f"{side.name}: a log, left aside\n")
    assert compare.main([str(h), str(o)]) == 0
    (o / "tables" / "extra.csv").write_text("a\n")
    assert compare.main([str(h), str(o)]) == 1
    assert "DIFFERS tables/extra.csv: extra: not on the host" in capsys.readouterr().out
    (o / "tables" / "extra.csv").unlink()
    (h / "tables" / "only_host.csv").write_text("a\n")
    assert compare.main([str(h), str(o)]) == 1
    assert "DIFFERS tables/only_host.csv: missing" in capsys.readouterr().out
    (h / "summary.md").write_text("T1: confirmed\n")
    (o / "summary.md").write_text("T1: not confirmed\n")
    assert compare.main([str(h / "summary.md"), str(o / "summary.md")]) == 1
    assert "DIFFERS summary.md: bytes differ" in capsys.readouterr().out
    assert compare.main([str(h / "summary.md"), str(o / "absent.md")]) == 1


def test_a_file_that_cannot_be_read_is_a_named_difference_not_a_traceback(tmp_path, capsys):
    h, o = tmp_path / "h", tmp_path / "o"
    h.mkdir(), o.mkdir()
    _write(h / "contrasts.parquet", pd.DataFrame({"delta": [0.5]}))
    (o / "contrasts.parquet").write_bytes(b"PAR1 not really")
    (h / "prereg.json").write_text('{"T1": "less"}')
    (o / "prereg.json").write_text('{"T1": ')
    why = compare.difference(h / "contrasts.parquet", o / "contrasts.parquet")
    assert why.startswith("other: unreadable Parquet file (") and "ArrowInvalid" in why
    assert compare.difference(o / "contrasts.parquet", h / "contrasts.parquet").startswith("host: unreadable Parquet")
    why = compare.difference(h / "prereg.json", o / "prereg.json")
    assert why.startswith("other: unreadable JSON file (JSONDecodeError")
    assert compare.main([str(h), str(o)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS contrasts.parquet: other: unreadable Parquet file" in out and "0 of 2 files equal" in out


def test_dockerfiles_take_pips_index_as_build_secrets_only():
    """Every pip install reads the pipconf and cacert secrets (BuildKit's RUN --mount=type=secret, which Docker and
    podman both take); nothing else of the host's pip configuration is mounted or copied."""
    for image in ("analysis", "train"):
        text = (ROOT / "containers" / image / "Dockerfile").read_text()
        runs = re.findall(r"^RUN (?:.*\\\n)*.*$", text, re.M)
        for run in (r for r in runs if "pip install" in r and "--no-deps" not in r):  # (plugins: local wheels)
            assert "--mount=type=secret,id=pipconf,target=/etc/pip.conf" in run, run
            assert "--mount=type=secret,id=cacert,target=/etc/pip-ca.crt" in run, run
        assert " -v " not in text and "podman build -v" not in text
        assert "--secret id=pipconf" in text  # the header says how


def test_the_hosts_pip_configuration_becomes_a_build_secret_with_local_paths_served(tmp_path):
    (tmp_path / "pypi" / "simple" / "six").mkdir(parents=True)
    (tmp_path / "pypi" / "files").mkdir()
    (tmp_path / "pypi" / "files" / "six-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "pypi" / "simple" / "six" / "index.html").write_text('<a href="../../files/six-1.0-py3-none-any.whl">')
    (tmp_path / "c.txt").write_text("torch<=2.14.1\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    listing = "\n".join([
        f"global.extra-index-url='https://pypi.example/simple file://{tmp_path}/pypi/simple'",
        f"global.constraint='{tmp_path}/c.txt'",
        f"global.cert='{tmp_path}/ca.crt'",
        "global.timeout='60'",
        f":env:.find-links='{tmp_path}/pypi/files'",
        ":env:.timeout='180'",
        "install.no-binary=':none:'",
    ])
    config = pip_secrets.host_config(listing)
    assert config["global"]["timeout"] == "180"  # a PIP_* variable wins over the files, as in pip
    build, served, cert = pip_secrets.for_build(config, "http://127.0.0.1:8000")
    assert cert == f"{tmp_path}/ca.crt" and "cert" not in build["global"]
    assert served == {tmp_path / "pypi", tmp_path / "c.txt", tmp_path / "pypi" / "files"}
    assert build["global"]["extra-index-url"] == ("https://pypi.example/simple\n"
                                                  f"http://127.0.0.1:8000{tmp_path}/pypi/simple/")
    assert build["global"]["constraint"] == f"http://127.0.0.1:8000{tmp_path}/c.txt"
    text = pip_secrets.ini(build)
    assert f"    http://127.0.0.1:8000{tmp_path}/pypi/simple/\n" in text and "[install]\nno-binary = :none:" in text
    assert pip_secrets.ini({}) == ""


def test_the_build_index_server_serves_the_configured_paths_and_nothing_else(tmp_path):
    import functools
    import http.server
    import threading
    import urllib.error
    import urllib.request
    (tmp_path / "pypi" / "files").mkdir(parents=True)
    (tmp_path / "pypi" / "files" / "a.whl").write_bytes(b"wheel")
    (tmp_path / "secret.txt").write_text("not for the build")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(pip_secrets.Handler,
                                                                                 roots=[tmp_path / "pypi"]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert urllib.request.urlopen(f"{url}{tmp_path}/pypi/files/a.whl").read() == b"wheel"
        for path in (f"{tmp_path}/secret.txt", f"{tmp_path}/pypi/../secret.txt", "/etc/passwd"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(url + path)
    finally:
        server.shutdown()


def _oci_archive(path: Path, layers: list[dict[str, bytes | None]]) -> Path:
    """A minimal OCI archive (podman save --format oci-archive): index.json -> manifest -> layer tars."""
    import hashlib
    import io
    import json
    import tarfile

    blobs = {}

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    def layer(files: dict[str, bytes | None]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
                info.size = 0 if data is None else len(data)
                tar.addfile(info, None if data is None else io.BytesIO(data))
        return buf.getvalue()

    manifest = {"layers": [{"digest": blob(layer(files))} for files in layers]}
    index = {"manifests": [{"digest": blob(json.dumps(manifest).encode())}]}
    with tarfile.open(path, "w") as tar:
        for name, data in [("index.json", json.dumps(index).encode()), ("oci-layout", b"{}"),
                           *((f"blobs/sha256/{d.split(':')[1]}", b) for d, b in blobs.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_layer_check_finds_a_secret_path_or_its_stub_and_nothing_else(tmp_path):
    paths = ["/etc/pip.conf", "/opt/pypi", "/run/secrets"]
    assert layers.under("./etc/pip.conf", paths) == "/etc/pip.conf"
    assert layers.under("opt/pypi/simple/index.html", paths) == "/opt/pypi"
    assert layers.under("etc/.wh.pip.conf", paths) is None           # a deletion
    assert layers.under("etc/pip.conf.d", paths) is None and layers.under("opt/pypi-more", paths) is None
    archive = _oci_archive(tmp_path / "image.tar", [
        {"etc/": None, "etc/pip.conf": b"[global]\n"},               # the base's: not the build's
        {"opt/": None, "opt/venv/": None, "etc/": None, "etc/hosts": b"127.0.0.1 localhost\n"},
        {"etc/": None, "etc/pip.conf": b"", "opt/pypi/": None},      # what `podman build -v` left
    ])
    hits = layers.found_in_tars(layers.tar_layers(archive), 1, paths)
    assert [h.split(": ", 1)[1] for h in hits] == ["etc/pip.conf (/etc/pip.conf)", "opt/pypi (/opt/pypi)"]
    assert hits[0].startswith("layer 2 sha256:")
    assert layers.found_in_tars(layers.tar_layers(archive), 3, paths) == []
    (tmp_path / "l1" / "diff" / "etc").mkdir(parents=True)
    (tmp_path / "l1" / "diff" / "etc" / "hosts").write_text("")
    (tmp_path / "l2" / "diff" / "opt" / "pypi").mkdir(parents=True)
    assert layers.found_in_dirs([tmp_path / "l1" / "diff", tmp_path / "l2" / "diff"], paths) == ["layer l2: /opt/pypi"]


def _built_from(image: str, commit: str, env: dict) -> bool:
    """Whether `image` exists and was built from `commit` (its MCGRPO_GIT_SHA): images an older checkout built,
    before its Dockerfiles took build secrets, are that checkout's, not this one's."""
    inspected = subprocess.run(["podman", "image", "inspect", image, "--format", "{{json .Config.Env}}"],
                               capture_output=True, text=True, env=env)
    return inspected.returncode == 0 and f"MCGRPO_GIT_SHA={commit}" in inspected.stdout


def test_the_built_images_hold_no_build_secret_path():
    """Where `make test-containers` has built the images from this commit (else skipped): their own layers, as
    podman stores them."""
    if not shutil.which("podman"):
        pytest.skip("no podman")
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "tests" / "containers" / "containers.conf")}
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    images = [i for i in ("localhost/mcgrpo-analysis", "localhost/mcgrpo-train-cpu") if _built_from(i, head, env)]
    base = "localhost/mcgrpo-base:bookworm"
    if not images or subprocess.run(["podman", "image", "exists", base], env=env).returncode:
        pytest.skip("the images of make test-containers are not built here from this commit")
    for image in images:
        out = subprocess.run([sys.executable, str(ROOT / "tests" / "containers" / "layers.py"), image, base,
                              "/etc/pip.conf", "/etc/pip-ca.crt", "/run/secrets", "/etc/xdg/pip", "/opt/pypi",
                              "/opt/pypi-more", "/opt/wheels", str(Path.home() / ".config" / "pip")],
                             capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stdout + out.stderr


def documented_apptainer_commands() -> list[tuple[str, str]]:
    """(where, command) of every `snakemake ... apptainer ...` command in README.md, docs/, the profiles' comments
    and the Dockerfiles' comments; a bare `--apptainer-args=...` line (the profile's comment) as a snakemake
    command of its own. Lines continued with a backslash are joined."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "profiles").glob("*/*.yaml")),
             *sorted((ROOT / "containers").glob("*/Dockerfile"))]
    found = []
    for path in files:
        text = re.sub(r"\\\n\s*#?\s*", " ", path.read_text())
        for n, line in enumerate(text.splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            for command in re.findall(r"(?<![\w./-])(snakemake\s[^`\n|]*)", line):
                if "apptainer" in command:
                    found.append((where, command.split(" # ")[0].strip()))
            if re.match(r"\s*#?\s*--apptainer-args", line) and "snakemake" not in line:
                found.append((where, "snakemake --sdm apptainer " + line.lstrip(" #").strip()))
    return found


def test_every_documented_apptainer_command_parses_as_written():
    """Snakemake's own parser on every command a reader would copy: `--apptainer-args "--nv"` (a separate value that
    starts with "-") is refused by Snakemake 9 with `expected one argument`; `--apptainer-args="--nv"` is not."""
    from snakemake.cli import get_argument_parser
    commands = documented_apptainer_commands()
    assert len(commands) >= 6, commands  # README, cluster.md, containers.md, the profile's and Dockerfile's comments
    wheres = {w.split(":")[0] for w, _ in commands}
    assert {"README.md", "docs/containers.md", "docs/cluster.md", "profiles/slurm/config.yaml",
            "containers/train/Dockerfile"} <= wheres, wheres
    parser = get_argument_parser()
    for where, command in commands:
        try:
            args = parser.parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"{where}: Snakemake refuses `{command}`")
        assert "APPTAINER" in str(args.software_deployment_method), (where, command)
        if "--apptainer-args" in command:
            assert args.apptainer_args.split()[0] == "--nv", (where, command)  # the GPU flag kept
    broken = next(c for w, c in commands if "--apptainer-args=" in c).replace("--apptainer-args=", "--apptainer-args ")
    with pytest.raises(SystemExit):  # the check catches the form that fails
        parser.parse_args(shlex.split(broken)[1:])


STAND_IN = """#!/usr/bin/env bash
# apptainer for the test: records its arguments, refuses any it does not know, runs the job without a container
echo "$*" >> {log}
if [[ $1 == --version ]]; then echo "apptainer version 1.3.6"; exit 0; fi
while [[ $1 == --quiet || $1 == --silent ]]; do shift; done
[[ $1 == exec ]] || {{ echo "apptainer: not exec: $*" >&2; exit 2; }}
shift
while [[ $1 == -* ]]; do
    case $1 in
        --nv) shift ;;
        --home | --pwd | --bind | -B) shift 2 ;;
        *) echo "apptainer: unsupported option $1" >&2; exit 2 ;;
    esac
done
[[ $1 == *.sif ]] || {{ echo "apptainer: no image: $1" >&2; exit 2; }}
shift
exec "$@"
"""


@pytest.mark.slow
def test_a_finished_study_switched_to_apptainer_reruns_only_without_software_env(tmp_path):
    """docs/containers.md as written, with a stand-in apptainer: a study finished without containers, switched to
    `--sdm apptainer`, would rerun every job (software environment definition has changed); with
    `--rerun-triggers mtime params input` nothing; and `--apptainer-args="--nv -B ..."` reaches apptainer."""
    import yaml

    from conftest import SMALL_STUDY, SNAKEMAKE_ENV, snakemake, snakemake_command
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    done = snakemake(tmp_path, "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    images = {name: str(tmp_path / f"mcgrpo-{name}.sif") for name in ("train", "analysis")}
    (tmp_path / "images.yaml").write_text(yaml.safe_dump({"containers": images}))
    (tmp_path / "bin").mkdir()
    log = tmp_path / "apptainer.log"
    (tmp_path / "bin" / "apptainer").write_text(STAND_IN.format(log=log))
    (tmp_path / "bin" / "apptainer").chmod(0o755)
    env = {**SNAKEMAKE_ENV, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{SNAKEMAKE_ENV['PATH']}"}
    configs = ["--configfile", str(tmp_path / "study.yaml"), str(tmp_path / "images.yaml")]

    def dry(*args):  # README's and docs/containers.md's commands with -n (the slurm profile: a dry run needs no cluster)
        out = snakemake(tmp_path, "--profile", "slurm", "-n", "--sdm", "apptainer", *args, *configs, configfile=None,
                        env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout + out.stderr

    everything = dry()
    assert "software environment definition has changed" in everything
    assert re.search(r"^train\s+\d+$", everything, re.M), everything[-3000:]  # training included
    assert "Nothing to be done" in dry("--rerun-triggers", "mtime", "params", "input")
    assert "Nothing to be done" in dry("--rerun-triggers", "mtime", "params", "input",
                                       f"--apptainer-args=--nv -B /data -B {Path.home()}/.cache/huggingface")
    summary = (tmp_path / "results" / "mini" / "summary.md").read_text()
    # One job for real, through a shell as a reader types it ($HOME expanded there).
    command = snakemake_command(tmp_path, "--cores", "1", "--sdm", "apptainer", "--rerun-triggers", "mtime", "params",
                                "input", "--forcerun", "summary", *configs, configfile=None)
    line = " ".join(shlex.quote(c) for c in command) + ' --apptainer-args="--nv -B /data -B $HOME/.cache/huggingface"'
    ran = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    calls = [c for c in log.read_text().splitlines() if " exec " in f" {c} "]
    assert len(calls) == 1 and "mcgrpo-analysis.sif" in calls[0], calls
    assert f"--nv -B /data -B {Path.home()}/.cache/huggingface" in calls[0], calls
    assert (tmp_path / "results" / "mini" / "summary.md").read_text() == summary
