#!/usr/bin/env bash
# slurm_local.sh: a one-node SLURM cluster on this machine, to try the cluster path of a sweep
# (hydra/launcher=slurm_cpu) before taking it to a real cluster, and for the `slurm` tests.
#
#   scripts/slurm_local.sh start|stop|status [RUN_DIR]
#
# start   writes a one-node slurm.conf and a munge key into RUN_DIR (never /etc), starts munged,
#         slurmctld and slurmd there as background processes, records their PIDs in RUN_DIR/pids,
#         waits until `sinfo` shows the node idle, and prints the line that points the SLURM
#         commands at it:  export SLURM_CONF=RUN_DIR/slurm.conf
# stop    cancels the jobs still in this cluster's queue (all of them are this cluster's own), then
#         stops exactly the PIDs that start recorded (SIGTERM, then SIGKILL after 10 s); leaves
#         RUN_DIR (its logs) in place
# status  the PIDs and whether each runs, and `sinfo` of the cluster
#
# RUN_DIR defaults to $SLURM_LOCAL_DIR, else .slurm_local in the repository (ignored by git).
# Ports: $SLURM_LOCAL_PORT (default 6817) for slurmctld and the next one for slurmd, so a second
# cluster (another RUN_DIR) can run beside the first with another port. $SLURM_LOCAL_CPUS (default:
# this machine's) is the node's CPU count: more than the machine has lets more one-CPU jobs run at
# once (the tests do so: their checks do not depend on a job having a core to itself).
# Needs, as root (slurmd starts job steps as the job's user): Debian's slurmctld, slurmd and munge,
#   apt-get install -y slurmctld slurmd munge
# Exit status: 0 done, 1 a daemon did not come up (its log's tail is printed), 2 bad usage or
# missing packages.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status [RUN_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
action=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
run_dir=${2:-${SLURM_LOCAL_DIR:-$repo/.slurm_local}}
port=${SLURM_LOCAL_PORT:-6817}
conf=$run_dir/slurm.conf
pids=$run_dir/pids          # one "name pid" line per daemon, in start order
DAEMONS=(munged slurmctld slurmd)

missing_packages() {
    local missing=()
    for cmd in munged slurmctld slurmd sinfo sbatch; do
        command -v "$cmd" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    if ((${#missing[@]})); then
        echo "slurm_local: not installed: ${missing[*]}; as root: apt-get install -y slurmctld slurmd munge" >&2
        exit 2
    fi
}

pid_of() { awk -v n="$1" '$1 == n {print $2}' "$pids" 2>/dev/null || true; }
alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

write_conf() {
    local host cpus mem_mb
    host=$(hostname -s)
    cpus=${SLURM_LOCAL_CPUS:-$(nproc)}
    # what slurmd will find, less 5% for the system: a node that reports less memory than its
    # configuration says is drained by slurmctld
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)
    mkdir -p "$run_dir"/{munge,state,spool,log}
    chmod 0700 "$run_dir" "$run_dir/munge"  # munged refuses a key or socket folder others can write
    cat >"$conf" <<EOF
# written by scripts/slurm_local.sh: a one-node cluster in $run_dir
ClusterName=selfattn-local
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$run_dir/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$run_dir/state
SlurmdSpoolDir=$run_dir/spool/%n
SlurmctldPidFile=$run_dir/slurmctld.pid
SlurmdPidFile=$run_dir/slurmd.pid
SlurmctldLogFile=$run_dir/log/slurmctld.log
SlurmdLogFile=$run_dir/log/slurmd.log
# no cgroups in a container or a VM without systemd: processes tracked by their parent ids
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# no slurmdbd: sacct has nothing to read (runners/slurm_status.py polls squeue instead)
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# finished jobs stay visible to squeue for 10 minutes: the sweep's status polling reads them there
MinJobAge=600
# a job past its time limit is signalled at once and killed 5 s later (tests of time limits stay short)
KillWait=5
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
# the node's CPUs as written below, even when SLURM_LOCAL_CPUS says more than the machine has
SlurmdParameters=config_overrides
InactiveLimit=0
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    if [[ ! -s $run_dir/munge/munge.key ]]; then
        dd if=/dev/urandom of="$run_dir/munge/munge.key" bs=1024 count=1 status=none
        chmod 0400 "$run_dir/munge/munge.key"
    fi
}

start_daemon() {  # name, command...: started in its own session, its PID recorded
    local name=$1; shift
    setsid "$@" >>"$run_dir/log/$name.out" 2>&1 </dev/null &
    echo "$name $!" >>"$pids"
}

wait_for() {  # seconds, what, command...: retry the command until it succeeds
    local seconds=$1 what=$2; shift 2
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "slurm_local: $what did not come up in ${seconds}s; logs in $run_dir/log:" >&2
    tail -n 15 "$run_dir"/log/* >&2 || true
    return 1
}

node_idle() { [[ $(SLURM_CONF=$conf sinfo -h -N -o %t 2>/dev/null) == idle* ]]; }

start() {
    missing_packages
    for name in "${DAEMONS[@]}"; do
        if alive "$(pid_of "$name")"; then
            echo "slurm_local: already running in $run_dir ($name pid $(pid_of "$name")); stop it first" >&2
            exit 2
        fi
    done
    write_conf
    : >"$pids"
    export PATH=$PATH:/usr/sbin SLURM_CONF=$conf
    start_daemon munged munged --foreground --force --socket="$run_dir/munge/munge.socket.2" \
        --key-file="$run_dir/munge/munge.key" --pid-file="$run_dir/munge/munged.pid" \
        --seed-file="$run_dir/munge/munged.seed" --log-file="$run_dir/log/munged.log"
    wait_for 10 munged test -S "$run_dir/munge/munge.socket.2" || { stop; exit 1; }
    # -i: start afresh, ignoring a state folder that a killed earlier run may have left
    start_daemon slurmctld slurmctld -D -i -f "$conf"
    wait_for 20 slurmctld scontrol ping || { stop; exit 1; }
    start_daemon slurmd slurmd -D -f "$conf"
    wait_for 30 "the node (sinfo: idle)" node_idle || { stop; exit 1; }
    echo "slurm_local: cluster up in $run_dir ($(tr '\n' ' ' <"$pids"))"
    echo "export SLURM_CONF=$conf"
}

stop() {
    [[ -s $pids ]] || { echo "slurm_local: nothing recorded in $pids"; return 0; }
    local name pid jobs
    if alive "$(pid_of slurmctld)"; then
        # job steps run outside slurmd's process tree: cancel them so none outlives the cluster
        jobs=$(SLURM_CONF=$conf squeue -h -o %A 2>/dev/null | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            SLURM_CONF=$conf scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                [[ -z $(SLURM_CONF=$conf squeue -h -o %A 2>/dev/null) ]] && break
                sleep 0.2
            done
        fi
    fi
    # the reverse of the start order: slurmd, slurmctld, then munged, which both need until they exit
    while read -r name pid; do
        alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.2; done
        if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
        echo "slurm_local: stopped $name ($pid)"
    done < <(tac "$pids")
    : >"$pids"
}

status() {
    [[ -s $pids ]] || { echo "slurm_local: not running (no PIDs in $pids)"; return 1; }
    local name pid down=0
    while read -r name pid; do
        if alive "$pid"; then echo "$name $pid running"; else echo "$name $pid gone"; down=1; fi
    done <"$pids"
    SLURM_CONF=$conf sinfo || down=1
    return $down
}

case $action in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) usage ;;
esac
