"""tests/slurm/cluster.sh leaves alone what it did not start: `down` stops only the daemons whose PIDs its `up`
recorded in the checkout (.cluster/pids), `down --purge` removes only what `up` recorded as installed or created,
and the SLURM tests skip unless asked or unless this checkout started the cluster. Run against stand-in daemons
(copies of `sleep` named like SLURM's), never the real ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, own_cluster

SCRIPT = ROOT / "tests" / "slurm" / "cluster.sh"
CONF = Path("/etc/slurm/slurm.conf")
pytestmark = pytest.mark.skipif(CONF.exists() and "ClusterName=mcgrpo" not in CONF.read_text(),
                                reason=f"{CONF} is another cluster's: the script refuses to run here")


@pytest.fixture
def checkout(tmp_path):
    """A checkout holding only the script, and a stand-in program named slurmctld."""
    (tmp_path / "tests" / "slurm").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "tests" / "slurm" / "cluster.sh")
    (tmp_path / "bin").mkdir()
    shutil.copy(shutil.which("sleep"), tmp_path / "bin" / "slurmctld")
    (tmp_path / ".cluster").mkdir()
    return tmp_path


def _daemon(checkout: Path) -> int:
    """A stand-in slurmctld, detached (not this process's child: once killed, it is reaped at once)."""
    out = subprocess.run(["sh", "-c", f"'{checkout}/bin/slurmctld' 300 >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld"
    except OSError:
        return False


def _down(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(checkout / "tests" / "slurm" / "cluster.sh"), "down", *args],
                          capture_output=True, text=True, timeout=60)


def test_down_stops_the_recorded_daemon_and_no_other_of_the_same_name(checkout):
    ours, theirs = _daemon(checkout), _daemon(checkout)
    try:
        (checkout / ".cluster" / "pids").write_text(f"slurmctld {ours}\n")
        done = _down(checkout)
        assert done.returncode == 0, done.stderr
        deadline = time.time() + 10
        while _alive(ours) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(ours) and _alive(theirs)
        assert not (checkout / ".cluster" / "pids").exists()
    finally:
        subprocess.run(["kill", str(ours), str(theirs)], capture_output=True)


def test_down_without_recorded_pids_stops_nothing(checkout):
    theirs = _daemon(checkout)
    try:
        (checkout / ".cluster" / "pids").write_text(f"slurmd {theirs}\n")  # a pid that is not that daemon's
        assert _down(checkout).returncode == 0
        (checkout / ".cluster" / "pids").unlink(missing_ok=True)
        assert _down(checkout).returncode == 0
        assert _alive(theirs)
    finally:
        subprocess.run(["kill", str(theirs)], capture_output=True)


def test_purge_removes_what_up_recorded_as_created_and_nothing_else(checkout, tmp_path_factory):
    made, kept = tmp_path_factory.mktemp("made"), tmp_path_factory.mktemp("kept")
    (made / "slurm.conf").write_text("ClusterName=mcgrpo\n")
    (checkout / ".cluster" / "created").write_text(f"{made}\n")
    done = _down(checkout, "--purge")
    if _controller_runs():  # a real cluster is up, and the stand-in checkout did not start it
        assert done.returncode == 1 and "this checkout did not start runs" in done.stderr
        assert made.exists() and (checkout / ".cluster" / "created").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert not made.exists() and kept.exists() and not (checkout / ".cluster").exists()


def _controller_runs() -> bool:
    try:
        pid = int(Path("/run/slurm/slurmctld.pid").read_text())
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld"
    except (OSError, ValueError):
        return False


def test_the_script_stops_nothing_by_name():
    text = SCRIPT.read_text()
    assert not any(word in text for word in ("pkill", "killall", "mysqladmin shutdown"))


@pytest.mark.skipif(own_cluster(), reason="this checkout's cluster is up: the SLURM tests run")
def test_the_slurm_tests_skip_unless_asked_naming_how_to_run_them():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly",
                           str(ROOT / "tests" / "test_slurm.py")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert done.stdout.splitlines()[-1].split()[1] == "skipped" and "passed" not in done.stdout.splitlines()[-1]
    assert skipped and all("make test-slurm" in line for line in skipped)
