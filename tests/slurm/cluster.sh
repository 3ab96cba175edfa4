#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for `make test-slurm` and tests/test_slurm.py.
#   tests/slurm/cluster.sh up       install (once) and start it; a no-op when it is up already
#   tests/slurm/cluster.sh down     stop every daemon it started
#   tests/slurm/cluster.sh status   exit 0 when jobs can run
# Needs root and Debian (apt-get). No systemd: the daemons are started by hand. Partitions: `cpu` (the
# default) and `gpu`, whose one fake GPU (gres.conf File=/dev/null) lets `--gpus=1` jobs schedule, and `urgent`,
# a higher tier on the same node whose jobs preempt `gpu` jobs the way preemptible GPU partitions do: the job is
# sent SIGTERM, given GraceTime to end, and requeued under its own job id (PreemptMode=REQUEUE).
# Accounting goes through slurmdbd and MariaDB, since the Snakemake executor plugin polls `sacct`.
# PROCTRACK=cgroup (default; what clusters use) or linuxproc (where the machine has no usable cgroups).
set -euo pipefail

PROCTRACK=${PROCTRACK:-cgroup}
NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
CONF=/etc/slurm
STATE=/var/lib/slurm-test
LOGS=/var/log/slurm-test
PACKAGES="slurm-wlm munge mariadb-server slurmdbd"

log() { echo "cluster.sh: $*" >&2; }

# A machine whose slurm.conf is another cluster's (a site's head node) is left alone: `up` would stop its daemons
# and overwrite its config, and the tests would run against it.
ours() { grep -qx "ClusterName=mcgrpo" "$CONF/slurm.conf" 2>/dev/null; }
refuse_other() {
    [ -e "$CONF/slurm.conf" ] && ! ours || return 0
    local name
    name=$(grep -m1 -i '^ClusterName=' "$CONF/slurm.conf" || echo 'no ClusterName')
    log "$CONF/slurm.conf is another cluster's ($name): not touching it"
    exit 1
}

# A pid file names its daemon: /run is not a tmpfs on every machine, so a file left from before a reboot can
# hold a pid that some other process has now (CI: slurmd never started: another process had its old pid).
running() {  # running PIDFILE: the daemon the file is named after runs under that pid
    local pid
    pid=$(cat "$1" 2>/dev/null) && [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "$(basename "$1" .pid)" ]
}

install() {
    command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null &&
        command -v munged >/dev/null && return
    log "installing $PACKAGES"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $PACKAGES >/dev/null
}

slurm_conf() {
    cat <<EOF
ClusterName=mcgrpo
SlurmctldHost=$NODE
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NODE
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# Seconds between SIGTERM and SIGKILL when a job is cancelled or hits its time limit (SLURM's default).
KillWait=30
MinJobAge=60
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=urgent Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
}

write_config() {
    mkdir -p "$CONF" "$STATE"/{ctld,d} "$LOGS" /run/slurm
    chown -R slurm:slurm "$STATE" "$LOGS" /run/slurm
    slurm_conf >"$CONF/slurm.conf"
    echo "NodeName=$NODE Name=gpu File=/dev/null" >"$CONF/gres.conf"
    cat >"$CONF/cgroup.conf" <<EOF
CgroupPlugin=autodetect
CgroupAutomount=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
    cat >"$CONF/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$NODE
SlurmUser=slurm
PidFile=/run/slurm/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
    chown slurm:slurm "$CONF/slurmdbd.conf"
    chmod 600 "$CONF/slurmdbd.conf"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2; shift 2
    for _ in $(seq "$((seconds * 2))"); do "$@" >/dev/null 2>&1 && return; sleep 0.5; done
    log "$what did not come up; the ends of the logs in $LOGS:"
    tail -n 15 "$LOGS"/*.log >&2 || true
    exit 1
}

start() {
    mkdir -p /run/munge /run/mysqld
    chown munge:munge /run/munge
    chown mysql:mysql /run/mysqld
    [ -f /etc/munge/munge.key ] || mungekey --create
    running /run/munge/munged.pid || runuser -u munge -- munged
    if ! mysqladmin ping >/dev/null 2>&1; then
        (mariadbd --user=mysql >"$LOGS/mariadb.log" 2>&1 &)
        wait_for 30 mariadb mysqladmin ping
    fi
    mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    running /run/slurm/slurmdbd.pid || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i -Q add cluster mcgrpo >/dev/null 2>&1 || true
    sacctmgr -i -Q add account mcgrpo Cluster=mcgrpo Description=tests >/dev/null 2>&1 || true
    sacctmgr -i -Q add user root Account=mcgrpo DefaultAccount=mcgrpo >/dev/null 2>&1 || true
    running /run/slurm/slurmctld.pid || slurmctld
    wait_for 30 slurmctld scontrol ping
    # A cluster this script starts begins with no jobs. The controller's saved state can name jobs whose processes
    # died with the machine: it recovers them as running, and they hold their CPUs and the one GPU for good (CI: a
    # job running when the machine was last stopped kept every test job pending). Cancelling keeps job ids unique,
    # which the executor plugin's `sacct` polls need; `slurmctld -c` would restart them at 1.
    squeue -h -o %A | xargs -r scancel
    running /run/slurm/slurmd.pid || slurmd
    wait_for 60 "node $NODE" sh -c "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"
}

status() {
    ours && scontrol ping >/dev/null 2>&1 && sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)' && sacct -n -X -S now >/dev/null
}

stop_daemon() {  # stop_daemon PIDFILE, and wait until it is gone, so that a start right after starts it again
    running "$1" || return 0
    kill "$(cat "$1")"
    for _ in $(seq 60); do running "$1" || return 0; sleep 0.5; done
}

stop() {
    for d in slurmd slurmctld slurmdbd; do stop_daemon "/run/slurm/$d.pid"; done
    mysqladmin shutdown >/dev/null 2>&1 || true
    stop_daemon /run/munge/munged.pid
}

case "${1:-}" in
    up)
        refuse_other
        if status && [ "$(slurm_conf)" = "$(cat "$CONF/slurm.conf")" ]; then log "up already"; exit 0; fi
        install
        stop  # a cluster up with an older slurm.conf restarts with this one
        write_config
        start
        log "up: node $NODE, $CPUS CPUs, partitions cpu (default), gpu and urgent, proctrack/$PROCTRACK" ;;
    down) refuse_other; stop; log "down" ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
