"""run.json names the CPU model a run was timed on (the figures' time axes show it), not just 'x86_64'."""

import platform

from mcgrpo.train import job
from mcgrpo.core.machine import cpu_model


def test_cpu_model_reads_the_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n")
    assert cpu_model(info) == "AMD EPYC 7B13 64-Core Processor"
    assert cpu_model(tmp_path / "missing") == (platform.processor() or platform.machine() or "unknown CPU")


def test_run_json_records_the_cpu_model(tiny):
    hardware = job.hardware(tiny[0])
    assert hardware["cpu"] == cpu_model() and hardware["device"] == "cpu" and hardware["threads"] >= 1
