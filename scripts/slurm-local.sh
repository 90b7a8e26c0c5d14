#!/usr/bin/env bash
# A real single-node Slurm on this machine, for evalkit's Slurm executor suite (tests/slurm).
#
#   bash scripts/slurm-local.sh start    install slurm-wlm + munge if missing, start munged,
#                                        slurmctld and slurmd, wait until the node is idle
#   bash scripts/slurm-local.sh stop     cancel this cluster's jobs, stop exactly the daemons
#                                        `start` started (by the pid files in its folder)
#   bash scripts/slurm-local.sh status   daemons, sinfo, squeue; exit 0 only if all are up
#   bash scripts/slurm-local.sh env      print the line clients need: export SLURM_CONF=...
#
# Everything lives in one folder, $EVALKIT_SLURM_DIR (default /tmp/evalkit-slurm): slurm.conf,
# a private munge key and socket, state, spool, logs and pid files. Nothing under /etc or /run
# is written, so a system Slurm or munge (if any) is untouched; clients (sbatch, squeue, evalkit)
# find this cluster through SLURM_CONF=$EVALKIT_SLURM_DIR/slurm.conf.
#
# Needs root (Debian 12: Slurm 22.05). No GPUs are declared: configs use `slurm.gpus: false`.
#
# Exit codes:
#   0  done (start: the node is idle; status: every daemon runs)
#   1  status: something is not running
#   2  usage
#   3  Slurm cannot run here: not root, no apt-get, or the packages cannot be installed
#   4  a daemon did not start, or the node did not become idle (log tails are printed)
set -euo pipefail

DIR="${EVALKIT_SLURM_DIR:-/tmp/evalkit-slurm}"
CONF="$DIR/slurm.conf"
MUNGE_DIR="$DIR/munge"
SOCKET="$MUNGE_DIR/munge.socket"
PIDS="$DIR/run"
IDLE_TIMEOUT_S="${EVALKIT_SLURM_IDLE_TIMEOUT_S:-60}"
export SLURM_CONF="$CONF"

say() { echo "slurm-local: $*" >&2; }
die() { local code=$1; shift; say "$*"; exit "$code"; }

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        || missing+=(slurm-wlm)
    command -v munged >/dev/null && command -v mungekey >/dev/null || missing+=(munge)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die 3 "cannot install ${missing[*]}: not root"
    command -v apt-get >/dev/null || die 3 "cannot install ${missing[*]}: no apt-get on this machine"
    say "installing ${missing[*]} (apt-get)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
            >"$DIR/apt.log" 2>&1; then
        tail -n 5 "$DIR/apt.log" >&2
        die 3 "cannot install ${missing[*]} (apt-get failed; full log: $DIR/apt.log)"
    fi
}

# The pid recorded in pid file $1, if that process is alive and is the daemon $2.
live_pid() {
    local file="$PIDS/$1.pid" name=$2 pid
    [ -s "$file" ] || return 1
    pid=$(tr -d '[:space:]' <"$file")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1  # not a reused pid
    echo "$pid"
}

write_conf() {
    local host cpus mem_mb real_mb
    host=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    real_mb=$(( mem_mb * 9 / 10 < 8000 ? mem_mb * 9 / 10 : 8000 ))  # never more than the box has
    cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a single-node cluster for evalkit's tests.
ClusterName=evalkit-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# SIGTERM -> SIGKILL grace of a cancelled or timed-out job (default 30 s): evalkit cell stops
# its engine on SIGTERM within a few seconds.
KillWait=10
# Finished jobs stay visible to squeue/scontrol this long (the default; no accounting here).
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$real_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if live_pid munge/munged munged >/dev/null; then return 0; fi
    install -d -m 0755 -o munge -g munge "$MUNGE_DIR"  # 0755: non-root clients reach the socket
    if [ ! -s "$MUNGE_DIR/munge.key" ]; then
        mungekey --create --keyfile="$MUNGE_DIR/munge.key" >/dev/null
    fi
    chown munge:munge "$MUNGE_DIR/munge.key"
    chmod 0600 "$MUNGE_DIR/munge.key"
    install -d -m 0755 -o munge -g munge "$PIDS/munge"
    runuser -u munge -- munged --socket="$SOCKET" --key-file="$MUNGE_DIR/munge.key" \
        --pid-file="$PIDS/munge/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed" \
        || fail_start munged "$MUNGE_DIR/munged.log"
    wait_for_pid munge/munged munged "$MUNGE_DIR/munged.log"
}

start_slurm_daemon() {
    local name=$1
    if live_pid "$name" "$name" >/dev/null; then return 0; fi
    "/usr/sbin/$name" -f "$CONF" || fail_start "$name" "$DIR/log/$name.log"
    wait_for_pid "$name" "$name" "$DIR/log/$name.log"
}

wait_for_pid() {
    local file=$1 name=$2 log=$3
    for _ in $(seq 50); do
        live_pid "$file" "$name" >/dev/null && return 0
        sleep 0.1
    done
    fail_start "$name" "$log"
}

fail_start() {
    say "$1 did not start; last lines of $2:"
    tail -n 15 "$2" >&2 2>/dev/null || true
    exit 4
}

wait_idle() {
    local state=""
    for _ in $(seq $((IDLE_TIMEOUT_S * 2))); do
        state=$(sinfo -h -o %t 2>/dev/null | head -n 1 || true)
        [ "$state" = "idle" ] && return 0
        sleep 0.5
    done
    say "node not idle after ${IDLE_TIMEOUT_S} s (sinfo state: '${state:-no answer}'); slurmd log:"
    tail -n 15 "$DIR/log/slurmd.log" >&2 2>/dev/null || true
    exit 4
}

cmd_start() {
    [ "$(id -u)" -eq 0 ] || die 3 "needs root (slurmd runs jobs as their users; munged as munge)"
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$PIDS"
    install_packages
    write_conf
    start_munge
    start_slurm_daemon slurmctld
    start_slurm_daemon slurmd
    wait_idle
    say "up: $(sinfo -h -o '%P %t %c CPUs %m MB on %N')"
    echo "export SLURM_CONF=$CONF"
}

stop_one() {
    local file=$1 name=$2 pid
    pid=$(live_pid "$file" "$name") || { rm -f "$PIDS/$file.pid"; return 0; }
    kill -TERM "$pid"
    for _ in $(seq 100); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
    done
    [ -d "/proc/$pid" ] && kill -KILL "$pid"
    rm -f "$PIDS/$file.pid"
    say "stopped $name (pid $pid)"
}

cmd_stop() {
    if live_pid slurmctld slurmctld >/dev/null; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
        if [ -n "${jobs// /}" ]; then
            say "cancelling jobs still queued: $jobs"
            # shellcheck disable=SC2086 - one word per job id
            scancel $jobs || true
            for _ in $(seq 30); do
                [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.5
            done
        fi
    fi
    stop_one slurmd slurmd
    stop_one slurmctld slurmctld
    stop_one munge/munged munged
}

cmd_status() {
    local rc=0 pid
    for entry in munge/munged:munged slurmctld:slurmctld slurmd:slurmd; do
        if pid=$(live_pid "${entry%%:*}" "${entry##*:}"); then
            echo "${entry##*:}: running (pid $pid)"
        else
            echo "${entry##*:}: not running"
            rc=1
        fi
    done
    if [ $rc -eq 0 ]; then
        sinfo
        squeue
    fi
    return $rc
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
