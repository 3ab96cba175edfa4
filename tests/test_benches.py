"""Every bench runs at a tiny scale, so that a contract or API change that breaks one fails here, not on the
day someone needs its figures. These check that each completes and prints its figures, never the figures."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import SMALL_STUDY
from mcgrpo import cli, studies
from mcgrpo.core import layout
from mcgrpo.train import models
from mcgrpo.train.models.tiny import build_model, build_tokenizer

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
pytestmark = pytest.mark.slow  # each bench runs for real, if at a tiny scale: 20-85 s each


def _bench(script: str, *args: str, python: str = sys.executable, cwd: Path = ROOT) -> str:
    done = subprocess.run([python, str(BENCH / script), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_analysis_scale_runs_every_analysis_step(tmp_path):
    out = _bench("analysis_scale.py", "--tiny", "--studies", "2", "--root", str(tmp_path))
    assert "full analysis (no figures):" in out and "2 studies" in out
    assert all(step in out for step in ("drift", "contrasts", "curves", "breakdown", "tables"))


def test_dry_run_studies_counts_train_jobs_and_the_stored_runs_they_share(tmp_path):
    study = ROOT / "config" / "studies" / "selection.yaml"
    renamed = tmp_path / "renamed.yaml"  # the same runs under another study's name
    renamed.write_text(study.read_text().replace("study: selection", "study: renamed"))
    out = _bench("dry_run_studies.py", "--workdir", str(tmp_path), str(study), str(renamed))
    assert "selection" in out and "30 train jobs" in out and "dry-ran 2 studies" in out
    assert "train jobs: 60 in the studies' DAGs; 30 distinct stored runs" in out


def test_iteration_profile_of_the_paper_shape(tmp_path):
    out = _bench("iteration_profile.py", "--shape", "qwen2.5-1.5b", "--layers", "1", "--vocab", "1000",
                 "--limit", "4", "--warmup", "0", "--iterations", "1", "--device", "cpu")
    assert "Qwen2.5-1.5B shape" in out and all(s in out for s in ("generate", "update", "total"))


def test_gpu_run_dry_run_measures_times_tests_and_tabulates(tmp_path):
    out = _bench("gpu/run.py", "--dry-run", "--work", str(tmp_path))
    plan = out.split("\n\n")[0]
    assert "6 steps within 420 s" in plan and plan.count("[not in a dry run]") == 1  # compile: a GPU's only
    assert sum(int(cap) for cap in re.findall(r"at most +(\d+) s", plan)) == 420  # the caps fit the whole
    assert "(1 of its layers) (vocabulary 1000) (8x narrower), 8 x 8 x 4 tokens on cpu, decode static" in out
    assert re.search(r"^GPU tests: ok: \d+ passed, 5 skipped", out, re.M)  # the GPU tests skip on a CPU
    static, dynamic = (json.loads((tmp_path / f"{m}.json").read_text()) for m in ("static", "dynamic"))
    rows = {line[:30].strip(): line[30:].split() for line in out.splitlines() if line.startswith(("gen", "upd"))}
    for stage, shape in (("generate, decode static", static), ("update, decode static", static),
                         ("generate, decode dynamic", dynamic)):
        measured, paper, ratio, floor, over = rows[stage]
        key = stage.split(",")[0]
        assert float(measured) == pytest.approx(shape["seconds"][key], abs=5e-4)
        assert paper == {"generate": "1.034", "update": "1.610"}[key]
        assert float(ratio) == pytest.approx(float(measured) / float(paper), abs=0.01)
    assert rows["generate, decode compile"] == ["planned", "(dry", "run)"]
    update = json.loads((tmp_path / "update.json").read_text())
    assert set(update["update_s"]) == {"trainer", "microbatch 64", "Adam unfused", "log-softmax", "before"}
    for name, seconds in update["update_s"].items():
        assert float(rows[f"update alone, {name}"][0]) == pytest.approx(seconds, abs=5e-4)
    assert re.search(r"^one update by kernel kind \(s\): .*matrix products \d\.\d{3}", out, re.M)
    files = [f for f in tmp_path.glob("20*.json")]
    assert len(files) == 1
    measured = json.loads(files[0].read_text())
    assert measured["generate_s"] == pytest.approx(static["seconds"]["generate"])
    assert measured["generate_before_s"] == pytest.approx(dynamic["seconds"]["generate"])
    assert {"card", "torch", "transformers", "update_s", "matmul_tflops", "copy_tbps"} <= set(measured)
    assert measured["update_variants_s"] == update["update_s"] and measured["update_by_kind_s"] == update["by_kind_s"]


def test_update_profile_sorts_kernels_and_operators_into_kinds(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH / "gpu"))
    from update_profile import kind
    assert kind("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>") == "log-softmax"
    assert kind("aten::_log_softmax_backward_data") == "log-softmax"
    assert kind("aten::logsumexp") == kind("aten::scatter_add_") == "log-softmax"  # loss.chosen_logprobs
    assert kind("fmha_cutlassB_bf16_aligned_64x64_k64_sm80") == "attention"  # a cutlass kernel, but attention's
    assert kind("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>") == "attention"
    assert kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "matrix products"
    assert kind("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT") == "matrix products"
    assert kind("aten::mm") == "matrix products" and kind("aten::mul") == "other"
    assert kind("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"
    assert kind("aten::_foreach_add_") == "optimizer"


def _gpu_run(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_run", BENCH / "gpu" / "run.py")
    gpu_run = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_run", gpu_run)  # its dataclass looks its module up
    spec.loader.exec_module(gpu_run)
    return gpu_run


def test_gpu_run_stops_a_step_at_its_cap_which_a_dry_run_stretches(monkeypatch, tmp_path):
    """On the GPU a cap keeps the check inside its device time; a dry run only shows each step runs, on a CPU that
    may be shared (make test-all at nice 19 took the update step past its 60 s)."""
    gpu_run = _gpu_run(monkeypatch)
    step = gpu_run.Step("nap", "a second's sleep", [sys.executable, "-c", "import time; time.sleep(1.5)"], 1, ())
    assert gpu_run.run_steps([step], tmp_path, 60) == {"nap": "stopped at its 1 s cap"}
    assert gpu_run.run_steps([step], tmp_path, 60, slack=gpu_run.DRY_RUN_SLACK) == {"nap": "ok"}


def test_gpu_run_floors_are_the_weights_read_per_step_and_six_flop_per_parameter_and_token(monkeypatch):
    gpu_run = _gpu_run(monkeypatch)
    shape = {"parameters": 1.5e9, "limit": 380, "prompt": 120}
    floor = gpu_run.floors(shape, {"copy_tbps": 4.0, "matmul_tflops": 800.0})
    assert floor["generate"] == pytest.approx(3.0e9 * 379 / 4.0e12)
    assert floor["update"] == pytest.approx(6 * 1.5e9 * 64 * 500 / 8.0e14)


def test_gpu_run_refuses_without_cuda_before_any_step(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "gpu" / "run.py"), "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "sees no CUDA GPU; --dry-run on a CPU" in done.stderr
    assert "== ceilings" not in done.stdout and not list(tmp_path.iterdir())


def test_iteration_profile_of_a_study_arm(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "results_dir": str(tmp_path / "results")}))
    study = studies.load(tmp_path / "study.yaml")
    assert cli.main(["prepare-data", "--task-json", json.dumps(study["task"]),
                     "--out", str(layout.data_dir(study))]) == 0
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, **study["model"]["tiny"], seed=0), tokenizer, layout.model_path(study))
    out = _bench("iteration_profile.py", "--study", str(tmp_path / "study.yaml"), "--arm", "outcome",
                 "--warmup", "0", "--iterations", "1", cwd=tmp_path)
    assert "mini / outcome" in out and "generated tokens per iteration" in out


def test_decode_share_times_each_share_and_decodes_the_same_tokens(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "results_dir": str(tmp_path / "results")}))
    out = _bench("decode_share.py", "--study", str(tmp_path / "study.yaml"), "--shares", "0", "0.5", "--rounds", "1",
                 cwd=tmp_path)
    assert "share 0.5    evaluation" in out and "tokens identical across shares: True" in out
    assert out.splitlines()[-1].startswith("evaluation time over share 0: 0 1.00x, 0.5 ")


def test_engines_times_each_engine_it_can_build(tmp_path):
    """hf everywhere; vllm where it imports (`make test-vllm` runs this in .venv-vllm), else the reason it is not."""
    tiny = {**SMALL_STUDY["model"]["tiny"], "hidden_size": 64}  # head size 32: the least vLLM's CPU attention takes
    study = {**SMALL_STUDY, "model": {**SMALL_STUDY["model"], "tiny": tiny}, "results_dir": str(tmp_path / "results")}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    out = _bench("engines.py", "--study", str(tmp_path / "study.yaml"), "--rounds", "2", cwd=tmp_path)
    assert re.search(r"^hf\s+[\d.]+ s per round\s+\d+ tokens\s+[\d.]+ tokens/s$", out, re.M), out
    if importlib.util.find_spec("vllm"):
        assert re.search(r"^vllm\s+[\d.]+ s per round", out, re.M) and "ratio vllm / hf: " in out, out
    else:
        assert "vllm: not timed (engine.name: vllm needs the vllm package" in out


BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"


@pytest.mark.skipif(not (ROOT / ".venv-bench" / ".installed").exists(),
                    reason="TRL lives in .venv-bench only (`make bench-env`; .ci/run builds it)")
def test_trainer_against_trl():
    out = _bench("trainer_vs_trl.py", "--warmup", "0", "--iterations", "1", "--limit", "8", "--score-all",
                 python=str(BENCH_PYTHON))
    assert "ratio mcgrpo / TRL" in out and "mcgrpo update FLOP/s" in out and "update / matmul floor" in out


def test_under_load_prints_the_ratio(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    out = _bench("under_load.py", "--study", str(tmp_path / "study.yaml"), "--warm-steps", "3", "--tokens", "300",
                 "--max-seconds", "120")
    assert "default (OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=400)" in out and "training run" in out and "train CPU" in out
    assert out.splitlines()[-1].startswith("ratio under load / quiet: ")


def test_pilot_levels_prints_each_levels_accuracy(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "results_dir": str(tmp_path / "results")}))
    out = _bench("pilot_levels.py", "--study", str(tmp_path / "study.yaml"), "--levels", "2", "3", "--problems", "2",
                 "--samples", "1", "--limit", "8", "--show", "1", "--temperature", "0.5", cwd=tmp_path)
    assert "at most 8 tokens, temperature 0.5, engine hf" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"[23] +\d", line)]
    assert [r[0] for r in rows] == ["2", "3"] and all(0 <= float(r[1]) <= 1 and float(r[5]) <= 8 for r in rows), out
