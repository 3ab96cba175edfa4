#!/usr/bin/env bash
# `make test-containers`: both images built and run for real, with no container registry, on a bare Debian
# machine as root (CI's). Steps, each skipped when its result is already there:
#   1. podman (Debian's packages, runc, debootstrap), configured by tests/containers/containers.conf;
#   2. a base image: debootstrap minbase bookworm with python3-venv, imported with `podman import`;
#   3. the analysis image and a CPU build of the train image (layers cached by podman);
#   4. a small study finished on the host (the plain path, no containers), then, with Snakemake's own
#      `--sdm apptainer` and podman standing in for apptainer (tests/containers/apptainer):
#      every analysis rule rerun inside the analysis image, and one training run redone inside the train image;
#   5. the results compared with the host's, both ways (tests/containers/compare.py): every analysis file and the
#      summary equal, every non-timing column of the training run equal, no file on one side only; and the
#      analysis image saved as an OCI archive (for .sif).
# pip inside a build reaches the package index with the host's pip configuration and certificates, passed as
# build secrets (./pip_secrets.py; never in a layer: ./layers.py checks each image's layers after its build).
# Images get their commit from git (GIT_SHA build argument).
# `run.sh build` stops after step 3 and `run.sh check` does step 4 on the images already built (CI builds the
# images beside its tests, then checks them); no argument does both.
# Env: BASE_IMAGE (skip step 2 and build on it), WORK (scratch, default /var/tmp/mcgrpo-containers), NICE,
# STEP_LIMIT (seconds one Snakemake command may take, default 600; past it run.sh exits 124).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/containers
WORK=${WORK:-/var/tmp/mcgrpo-containers}
NICE=${NICE:-nice -n 10}
SUITE=bookworm
MIRROR=${MIRROR:-http://deb.debian.org/debian}
export CONTAINERS_CONF=$HERE/containers.conf
started=$SECONDS
step() { printf '\n== [%3ds] %s\n' $((SECONDS - started)) "$*"; }

podman_up() {
    local need=()
    for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
    if ((${#need[@]})); then
        step "installing ${need[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc debootstrap
    fi
    podman info --format '{{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}}'
}

base_image() {
    BASE_IMAGE=${BASE_IMAGE:-localhost/mcgrpo-base:$SUITE}
    if podman image exists "$BASE_IMAGE"; then return; fi
    step "base image $BASE_IMAGE: debootstrap $SUITE"
    local rootfs=$WORK/rootfs
    rm -rf "$rootfs"
    $NICE debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE"
    rm -rf "$rootfs"
}

pip_secrets() {
    # The host's pip configuration and certificate bundle as the builds' secrets (`RUN --mount=type=secret` in the
    # Dockerfiles: never in a layer), its local paths (an index on disk, find-links) served on 127.0.0.1 while the
    # builds run: ./pip_secrets.py. SECRETS: the --secret arguments; SECRET_PATHS: what no layer may hold.
    local dir=$WORK/pip-secrets  # (its configuration may hold an index's credentials: 0700, gone after the builds)
    rm -rf "$dir"
    python3 "$HERE/pip_secrets.py" "$dir" &
    PIP_SERVER=$!
    trap pip_secrets_done EXIT
    for _ in $(seq 100); do [[ -e $dir/ready ]] && break; kill -0 "$PIP_SERVER" 2>/dev/null || break; sleep 0.2; done
    [[ -e $dir/ready ]] || { echo "pip_secrets.py did not start" >&2; return 1; }
    mapfile -t SECRETS <"$dir/secrets"
    mapfile -t SECRET_PATHS <"$dir/served"
    SECRET_PATHS+=(/etc/pip.conf /etc/pip-ca.crt /run/secrets /etc/xdg/pip "$HOME/.config/pip" "$HOME/.pip")
    printf '%s secret(s): %s\n' "${#SECRETS[@]}" "${SECRETS[*]#--secret=}"
}

pip_secrets_done() {  # the server stopped, the build's pip configuration deleted
    kill "$PIP_SERVER" 2>/dev/null || true
    rm -rf "${WORK:?}/pip-secrets"
}

build() {  # TAG DOCKERFILE [NAME=VALUE (build argument)...]
    local tag=$1 file=$2 log=$WORK/build-$1.log
    shift 2
    step "image $tag ($file${*:+, $*})"
    if ! $NICE podman build --network=host "${SECRETS[@]}" --build-arg BASE_IMAGE="$BASE_IMAGE" \
            --build-arg GIT_SHA="$SHA" "${@/#/--build-arg=}" -f "$ROOT/$file" -t "$tag" "$ROOT" >"$log" 2>&1; then
        tail -40 "$log"
        return 1
    fi
    podman run --rm --network=none "$tag" pip check
    python3 "$HERE/layers.py" "$tag" "$BASE_IMAGE" "${SECRET_PATHS[@]}"
    printf '%s: %s, python %s\n' "$tag" "$(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=iec)" \
        "$(podman run --rm --network=none "$tag" python -c 'import platform; print(platform.python_version())')"
}

snakemake_in() {  # FOLDER ARGS...: Snakemake on the small study in FOLDER, stopped after STEP_LIMIT seconds
    local folder=$1 rc=0
    shift
    # Each of these takes one or two minutes; a job that hangs (a container that never exits) fails the check with
    # its log and what podman still runs, rather than holding CI until its own limit with nothing shown.
    (cd "$folder" && timeout -k 30 "${STEP_LIMIT:-600}" snakemake -s "$ROOT/Snakefile" --cores 2 --quiet \
        --configfile study.yaml "$@") >>"$folder.log" 2>&1 || rc=$?
    ((rc == 0)) && return
    tail -40 "$folder.log"
    ((rc == 124 || rc == 137)) || return 1
    echo "run.sh: Snakemake in $folder stopped after ${STEP_LIMIT:-600} s; the containers and jobs left:" >&2
    timeout 30 podman ps --all --format '{{.ID}} {{.Status}} {{.Command}}' 2>&1 | head -20 || true
    ps -eo pid,etimes,args | grep -E 'mcgrpo|podman run' | grep -v grep | cut -c1-200 | head -20 || true
    return 124  # a hang: .ci/run checks once more (a failed comparison is not retried)
}

in_images() {  # NAME: a copy of the host's finished study, for Snakemake to redo some of its jobs in the images
    rm -rf "${WORK:?}/$1"
    cp -a "$WORK/host" "$WORK/$1"
    rm -f "$WORK/$1.log"
    printf 'containers: {train: %s, analysis: %s}\n' "$WORK/mcgrpo-train-cpu.sif" "$WORK/mcgrpo-analysis.sif" \
        >"$WORK/$1/images.yaml"
}

in_images_snakemake() {  # NAME ARGS...: Snakemake with --sdm apptainer, podman running the jobs (see ./apptainer)
    local name=$1
    shift
    PATH=$HERE:$PATH snakemake_in "$WORK/$name" images.yaml --sdm apptainer --rerun-triggers mtime "$@"
}

placed() {  # FOLDER EXPR: where mcgrpo.core.layout's EXPR (of cfg, the small study) puts it, under FOLDER/results
    (cd "$1" && python -c 'import sys; from mcgrpo import studies; from mcgrpo.core import layout
cfg = studies.load("study.yaml"); print(eval(sys.argv[1]).relative_to("results"))' "$2")
}

jobs_in_images() {  # NAME: how many jobs Snakemake ran in each image
    grep -o 'Activating singularity image .*' "$WORK/$1.log" | sed 's#.*/##' | sort | uniq -c \
        | awk '{printf "%s job(s) in %s\n", $1, $2}'
}

oci_archive() {  # TAG: the first half of the route to a .sif (README): an OCI archive apptainer can build from
    step "podman save --format oci-archive $1"
    podman save --format oci-archive --uncompressed -o "$WORK/$1.tar" "$1" >/dev/null
    tar -tf "$WORK/$1.tar" | grep -qx oci-layout
    echo "$1.tar: $(du -h "$WORK/$1.tar" | cut -f1), an OCI layout (apptainer build $1.sif oci-archive://$1.tar)"
    rm -f "$WORK/$1.tar"
}

compare() {  # NAME [--timing-aside] PATH...: the copy's folders or files (under results/) against the host's
    local name=$1 failed=0 opts=(--git-sha "$SHA")  # the images' git_sha is checked against HEAD on its own
    shift
    if [[ ${1:-} == --* ]]; then opts+=("$1"); shift; fi
    for folder in "$@"; do
        python "$HERE/compare.py" "${opts[@]}" "$WORK/host/results/$folder" "$WORK/$name/results/$folder" \
            | tee -a "$WORK/compare-$name.txt" || failed=1
    done
    return $failed
}

build_images() {  # steps 1-3
    step "podman"
    podman_up
    base_image
    pip_secrets
    build mcgrpo-analysis containers/analysis/Dockerfile
    build mcgrpo-train-cpu containers/train/Dockerfile PYTHON=python3 EXTRAS=train \
        REQUIREMENTS=containers/train/requirements-cpu.txt
    pip_secrets_done
    podman image prune -f >/dev/null  # earlier builds' images; the layers of these two stay cached
}

check_images() {  # step 4, on the images of this commit
    local tag
    for tag in mcgrpo-analysis mcgrpo-train-cpu; do
        podman image inspect --format '{{json .Config.Env}}' "$tag" 2>/dev/null | grep -q "MCGRPO_GIT_SHA=$SHA\"" ||
            { echo "run.sh check: no image $tag built from $SHA: run.sh build first" >&2; return 1; }
    done
    step "host: the small study, plain path (no containers)"
    mkdir -p "$WORK/host"
    cmp -s "$HERE/study.yaml" "$WORK/host/study.yaml" || cp "$HERE/study.yaml" "$WORK/host/study.yaml"
    # From scratch, every time (about a minute): a run cached from an earlier commit would be compared with the
    # images' run of this one, and its run.json can lack keys this commit writes.
    rm -rf "$WORK/host/results" "$WORK/host/.snakemake"
    snakemake_in "$WORK/host"
    rm -f "$WORK"/compare-*.txt

    step "analysis image: every analysis rule and the summary, then prepare_data, rerun"
    in_images analysis
    rm -rf "$WORK"/analysis/results/mini/{analysis,figures,tables,summary.md,summary.rst}
    in_images_snakemake analysis --config analysis_only=True -- analysis
    in_images_snakemake analysis --forcerun prepare_data -- prepare_data
    jobs_in_images analysis
    compare analysis mini/analysis mini/figures mini/tables mini/summary.md mini/summary.rst \
        "$(placed "$WORK/analysis" 'layout.data_dir(cfg)')"

    step "train image (CPU): one training run, redone"
    in_images train
    local run  # the run store's folder of outcome/seed1 (results/mini/runs/outcome/seed1 links to it)
    run=$(placed "$WORK/train" 'layout.run_dir(cfg, "outcome", 1)')
    rm -rf "${WORK:?}/train/results/$run"
    in_images_snakemake train -- "results/$run/iterations.parquet"
    jobs_in_images train
    compare train --timing-aside "$run"
    oci_archive mcgrpo-analysis
    step "done: every file equal"
}

main() {  # [build | check]: both when none is named
    mkdir -p "$WORK"
    SHA=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || true)
    case ${1:-all} in
        build) build_images ;;
        check) check_images ;;
        all) build_images; check_images ;;
        *) echo "usage: run.sh [build | check] (no argument: both)" >&2; return 2 ;;
    esac
}

main "$@"
