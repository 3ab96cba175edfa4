"""The OpenMP wait settings every `python -m mcgrpo` job starts with: passive after a short spin, unless the user
chose a wait policy."""

import os
import subprocess
import sys

from conftest import ROOT
from mcgrpo.core.openmp import describe, set_wait_defaults


def test_passive_after_a_short_spin_by_default():
    env = {}
    set_wait_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "400"}


def test_a_policy_the_user_set_gets_no_spin_added():
    for policy in ("ACTIVE", "PASSIVE"):
        env = {"OMP_WAIT_POLICY": policy}
        set_wait_defaults(env)
        assert env == {"OMP_WAIT_POLICY": policy}
    env = {"GOMP_SPINCOUNT": "0"}  # a spin the user set is kept, under the project's policy
    set_wait_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}
    assert describe({"OMP_WAIT_POLICY": "ACTIVE"}) == "OMP_WAIT_POLICY=ACTIVE"


def test_every_job_starts_with_them():
    """`python -m mcgrpo` sets them before anything loads OpenMP: a verb that fails at once still saw them."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = str(ROOT / "workflow")
    probe = ("import os, runpy, sys; sys.argv = ['mcgrpo', '--version']\n"
             "try: runpy.run_module('mcgrpo', run_name='__main__')\n"
             "except SystemExit: print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'], "
             "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "PASSIVE 400 False"
