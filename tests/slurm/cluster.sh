#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for `make test-slurm` and tests/test_slurm.py.
#   tests/slurm/cluster.sh up       install (once) and start it; a no-op when it is up already
#   tests/slurm/cluster.sh down     stop the daemons it started (their PIDs, recorded in <checkout>/.cluster/pids)
#   tests/slurm/cluster.sh down --purge   and remove what `up` installed: the packages it installed, the files and
#                                   folders it created (/etc/slurm, state, logs), as listed in <checkout>/.cluster/
#   tests/slurm/cluster.sh status   exit 0 when jobs can run
# <checkout>/.cluster/pids (git-ignored) is also the tests' sign that this checkout started the cluster
# (tests/conftest.py: the SLURM tests run then, or when asked with `make test-slurm`). Nothing is stopped by name:
# a daemon this script did not start (another checkout's, a site's) is never stopped.
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
OWN="$(cd "$(dirname "$0")/../.." && pwd)/.cluster"  # what this checkout's `up` started, installed and created
PIDS=$OWN/pids                # "<daemon> <pid>" lines
INSTALLED=$OWN/packages       # the packages `up` installed (absent before)
CREATED=$OWN/created          # the files and folders `up` created (absent before)

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

packages() { dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' | sort; }

install() {  # records the packages it installed, so that `down --purge` removes exactly those
    command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null &&
        command -v munged >/dev/null && return
    log "installing $PACKAGES"
    local before
    before=$(packages)
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $PACKAGES >/dev/null
    comm -13 <(echo "$before") <(packages) >>"$INSTALLED"
}

# The files and folders `up` may create; those absent before it are recorded for `down --purge`.
CREATES="$CONF $STATE $LOGS /run/slurm /run/munge /run/mysqld /etc/munge/munge.key /var/lib/mysql"
note_absent() { for path in $CREATES; do [ -e "$path" ] || grep -qxF "$path" "$CREATED" 2>/dev/null || echo "$path" >>"$CREATED"; done; }

record() {  # record NAME PID: a daemon this script started
    echo "$1 $2" >>"$PIDS"
}

started_by_us() {  # started_by_us NAME: the recorded pid of NAME runs a program of that name
    local pid
    pid=$(awk -v n="$1" '$1 == n {print $2}' "$PIDS" 2>/dev/null | tail -1)
    [ -n "$pid" ] && [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "$1" ]
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
# A requeued job waits cred_expire + 1 s before it runs again (SLURM's default: 120 s, nothing next to a real
# limit): 10 s here, so that a test run of five job lengths, requeued after each, takes minutes, not ten more.
AuthInfo=cred_expire=10
# A job that becomes eligible (a requeued one, its wait over) starts within seconds, not at the next 30-60 s pass.
SchedulerParameters=bf_interval=5,sched_interval=5
# The comment a train job gives itself (<study>.train.<arm>.s<seed>) and its exit, kept by sacct.
AccountingStoreFlags=job_comment
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
    running /run/munge/munged.pid || { runuser -u munge -- munged; wait_for 10 "munged's pid file" running /run/munge/munged.pid
                                       record munged "$(cat /run/munge/munged.pid)"; }
    if ! mysqladmin ping >/dev/null 2>&1; then
        mariadbd --user=mysql >"$LOGS/mariadb.log" 2>&1 &
        record mariadbd $!
        disown
        wait_for 30 mariadb mysqladmin ping
    fi
    mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    running /run/slurm/slurmdbd.pid || { slurmdbd; wait_for 10 "slurmdbd's pid file" running /run/slurm/slurmdbd.pid
                                         record slurmdbd "$(cat /run/slurm/slurmdbd.pid)"; }
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i -Q add cluster mcgrpo >/dev/null 2>&1 || true
    sacctmgr -i -Q add account mcgrpo Cluster=mcgrpo Description=tests >/dev/null 2>&1 || true
    sacctmgr -i -Q add user root Account=mcgrpo DefaultAccount=mcgrpo >/dev/null 2>&1 || true
    running /run/slurm/slurmctld.pid || { slurmctld; wait_for 10 "slurmctld's pid file" running /run/slurm/slurmctld.pid
                                           record slurmctld "$(cat /run/slurm/slurmctld.pid)"; }
    wait_for 30 slurmctld scontrol ping
    # A cluster this script starts begins with no jobs. The controller's saved state can name jobs whose processes
    # died with the machine: it recovers them as running, and they hold their CPUs and the one GPU for good (CI: a
    # job running when the machine was last stopped kept every test job pending). Cancelling keeps job ids unique,
    # which the executor plugin's `sacct` polls need; `slurmctld -c` would restart them at 1.
    squeue -h -o %A | xargs -r scancel
    running /run/slurm/slurmd.pid || { slurmd; wait_for 10 "slurmd's pid file" running /run/slurm/slurmd.pid
                                       record slurmd "$(cat /run/slurm/slurmd.pid)"; }
    wait_for 60 "node $NODE" sh -c "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"
}

status() {
    ours && scontrol ping >/dev/null 2>&1 && sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)' && sacct -n -X -S now >/dev/null
}

stop_daemon() {  # stop_daemon NAME: the one this script started (its recorded pid), and wait until it is gone,
                 # so that a start right after starts it again
    started_by_us "$1" || return 0
    local pid
    pid=$(awk -v n="$1" '$1 == n {print $2}' "$PIDS" | tail -1)
    kill "$pid"
    for _ in $(seq 60); do started_by_us "$1" || return 0; sleep 0.5; done
    log "$1 (pid $pid) did not stop"
    return 1
}

stop() {  # only what the PIDs file names; daemons running that this checkout did not start are left running
    [ -e "$PIDS" ] || return 0
    for d in slurmd slurmctld slurmdbd mariadbd munged; do stop_daemon "$d"; done
    for d in slurmd slurmctld slurmdbd; do
        running "/run/slurm/$d.pid" && ! started_by_us "$d" && log "$d runs, but not started by this checkout: left alone"
    done
    rm -f "$PIDS"
}

purge() {  # what `up` installed and created, once nothing of ours runs; refused while another's slurmctld runs
    if running /run/slurm/slurmctld.pid; then
        log "a slurmctld this checkout did not start runs (pid $(cat /run/slurm/slurmctld.pid)): not purging"
        exit 1
    fi
    if [ -s "$INSTALLED" ]; then
        log "purging $(wc -l <"$INSTALLED") packages that up installed"
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $(cat "$INSTALLED") >/dev/null
    fi
    [ -s "$CREATED" ] && xargs -r rm -rf <"$CREATED"
    rm -rf "$OWN"
}

case "${1:-}" in
    up)
        refuse_other
        mkdir -p "$OWN"
        note_absent
        if status && [ "$(slurm_conf)" = "$(cat "$CONF/slurm.conf")" ]; then log "up already"; exit 0; fi
        install
        stop  # a cluster up with an older slurm.conf restarts with this one
        write_config
        start
        log "up: node $NODE, $CPUS CPUs, partitions cpu (default), gpu and urgent, proctrack/$PROCTRACK" ;;
    down)
        refuse_other
        stop
        [ "${2:-}" = --purge ] && purge
        log "down${2:+ $2}" ;;
    status) status ;;
    *) echo "usage: $0 up|down [--purge]|status" >&2; exit 2 ;;
esac
