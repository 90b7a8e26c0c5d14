#!/usr/bin/env bash
# A real Slurm on this machine, for evalkit's Slurm executor suite (tests/slurm): one node, or
# two nodes that each have their own network, hostname and process table (`--nodes 2`).
#
#   bash scripts/slurm-local.sh start [--nodes 2]
#                                        install slurm-wlm + munge if missing, start munged,
#                                        slurmctld and slurmd(s), wait until every node is idle;
#                                        a cluster already up in that shape is left as it is
#   bash scripts/slurm-local.sh stop     cancel this cluster's jobs, stop exactly the daemons
#                                        `start` started (by the pid files in its folder); two
#                                        nodes: also their namespaces, veths and the bridge
#   bash scripts/slurm-local.sh status   daemons, sinfo, squeue; exit 0 only if all are up
#   bash scripts/slurm-local.sh env      print the line clients need: export SLURM_CONF=...
#   bash scripts/slurm-local.sh ps NODE  two nodes: every process on NODE (node1, node2) except
#                                        its init and slurmd, as that node's own `ps` shows them
#
# Two nodes on one machine (`--nodes 2`): each slurmd runs in its own network, UTS, mount and PID
# namespace. The host makes a Linux bridge evk-br0 at $SUBNET.1/24 and a veth pair per node
# (network namespaces evk-node1, evk-node2: eth0 at $SUBNET.11 and .12, hostnames node1 and
# node2); slurmctld runs on the host and is reached at the bridge address; every node's
# /etc/hosts (a bind mount inside its mount namespace, the host's file untouched) names the
# host and both nodes, so a job resolves its peers with `getent hosts node2`. The PID namespace
# makes "nothing left on the node" checkable (`ps NODE`) and stopping a node final: when its
# init exits the kernel kills whatever is left in it. munged stays on the host: network
# namespaces do not isolate unix sockets on the shared filesystem. Traffic never leaves the box.
#
# Everything lives in one folder, $EVALKIT_SLURM_DIR (default /tmp/evalkit-slurm): slurm.conf,
# a private munge key and socket, state, spool, logs and pid files. Nothing under /etc or /run
# is written, so a system Slurm or munge (if any) is untouched; clients (sbatch, squeue, evalkit)
# find this cluster through SLURM_CONF=$EVALKIT_SLURM_DIR/slurm.conf.
#
# Needs root (Debian 12: Slurm 22.05). No GPUs are declared: configs use `slurm.gpus: false`.
# Both nodes declare the whole machine's CPUs: they share its cores, as the tests expect.
#
# Exit codes:
#   0  done (start: every node is idle; status: every daemon runs)
#   1  status: something is not running
#   2  usage, or `start` asked for another shape than the cluster already running (stop it first)
#   3  Slurm cannot run here: not root, no apt-get, the packages cannot be installed, or (two
#      nodes) this machine cannot make network namespaces or a bridge
#   4  a daemon did not start, or a node did not become idle (log tails are printed)
set -euo pipefail

DIR="${EVALKIT_SLURM_DIR:-/tmp/evalkit-slurm}"
CONF="$DIR/slurm.conf"
MUNGE_DIR="$DIR/munge"
SOCKET="$MUNGE_DIR/munge.socket"
PIDS="$DIR/run"
IDLE_TIMEOUT_S="${EVALKIT_SLURM_IDLE_TIMEOUT_S:-60}"
SHAPE="$DIR/nodes"  # how many nodes the running cluster has (written by start)
SUBNET="${EVALKIT_SLURM_SUBNET:-10.77.0}"
BRIDGE=evk-br0
NODE_NAMES=(node1 node2)
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

# slurm.conf for $1 nodes: the host itself, or node1 and node2 behind the bridge.
write_conf() {
    local nodes=$1 host cpus mem_mb real_mb ctld_host slurmd_files node_lines part_nodes
    host=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    real_mb=$(( mem_mb * 9 / 10 < 8000 ? mem_mb * 9 / 10 : 8000 ))  # never more than the box has
    if [ "$nodes" -eq 1 ]; then
        ctld_host=$host
        slurmd_files="SlurmdSpoolDir=$DIR/spool
SlurmdPidFile=$PIDS/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd.log"
        node_lines="NodeName=$host CPUs=$cpus RealMemory=$real_mb State=UNKNOWN"
        part_nodes=$host
    else
        ctld_host="$host($SUBNET.1)"  # the nodes reach slurmctld at the bridge address
        # %n: each slurmd its own spool, log and pid file (the pid is its PID namespace's, so
        # this script tracks the nodes by their init's host pid in $PIDS/<node>.pid instead).
        slurmd_files="SlurmdSpoolDir=$DIR/spool/%n
SlurmdPidFile=$DIR/spool/%n/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log"
        real_mb=$(( real_mb / 2 ))
        node_lines=""
        local i
        for i in 1 2; do
            node_lines+="NodeName=node$i NodeAddr=$SUBNET.1$i NodeHostname=node$i CPUs=$cpus RealMemory=$real_mb State=UNKNOWN
"
        done
        part_nodes=node1,node2
    fi
    cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a $nodes-node cluster for evalkit's tests.
ClusterName=evalkit-local
SlurmctldHost=$ctld_host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
$slurmd_files
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
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
$node_lines
PartitionName=debug Nodes=$part_nodes Default=YES MaxTime=INFINITE State=UP
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

# Wait until sinfo shows $1 nodes, all idle.
wait_idle() {
    local nodes=$1 states=""
    for _ in $(seq $((IDLE_TIMEOUT_S * 2))); do
        states=$(sinfo -h -N -o %t 2>/dev/null | sort | uniq -c | xargs || true)
        [ "$states" = "$nodes idle" ] && return 0
        sleep 0.5
    done
    say "nodes not idle after ${IDLE_TIMEOUT_S} s (sinfo: '${states:-no answer}'); slurmd log:"
    tail -n 15 "$DIR"/log/slurmd*.log >&2 2>/dev/null || true
    exit 4
}

# --- two nodes: namespaces on a bridge -----------------------------------------------------------

# A node's init: PID 1 of the node's PID namespace, in its own network, UTS and mount namespaces.
# It names the node, gives it the cluster's /etc/hosts, runs slurmd in the foreground and reaps
# whatever is orphaned on the node; on SIGTERM it stops slurmd, and when it exits the kernel kills
# everything still in the namespace.
write_node_init() {
    cat >"$DIR/node-init.sh" <<'EOF'
#!/bin/bash
# Written by scripts/slurm-local.sh: PID 1 of one node (arguments: node name, hosts file, slurm.conf).
set -eu
name=$1 hosts=$2 conf=$3
hostname "$name"
mount --bind "$hosts" /etc/hosts
/usr/sbin/slurmd -D -N "$name" -f "$conf" &
slurmd=$!
trap 'kill -TERM "$slurmd" 2>/dev/null || true' TERM
wait "$slurmd" || wait "$slurmd" || true  # the first wait returns early when TERM is trapped
EOF
    chmod 0755 "$DIR/node-init.sh"
    {
        echo "127.0.0.1 localhost"
        echo "$SUBNET.1 $(hostname -s)"
        local i
        for i in 1 2; do echo "$SUBNET.1$i node$i"; done
    } >"$DIR/hosts"
}

# The host pid of node $1's init, if it is alive and inside that node's network namespace.
live_node() {
    local name=$1 pid
    pid=$(live_pid "$name" node-init.sh) || return 1
    [ -e "/run/netns/evk-$name" ] || return 1
    [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = "$(stat -L -c %i "/run/netns/evk-$name")" ] || return 1
    echo "$pid"
}

make_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge 2>"$DIR/log/net.log" \
            || die 3 "cannot make a bridge here: $(cat "$DIR/log/net.log")"
    fi
    ip addr replace "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

# Node $1 (index $2): its network namespace and veth on the bridge, then its init and slurmd.
start_node() {
    local name=$1 i=$2 ns="evk-$1" veth="evk-$1-h" upid init=""
    if live_node "$name" >/dev/null; then return 0; fi
    if [ ! -e "/run/netns/$ns" ]; then
        ip netns add "$ns" 2>"$DIR/log/net.log" \
            || die 3 "cannot make a network namespace here: $(cat "$DIR/log/net.log")"
    fi
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip link add "$veth" type veth peer name eth0 netns "$ns"
    fi
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr replace "$SUBNET.1$i/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    mkdir -p "$DIR/spool/$name"
    rm -f "$DIR/spool/$name/slurmd.pid"  # a stale one would pass for this start
    # nsenter, not `ip netns exec`: that remounts /sys without the cgroup mounts slurmd needs.
    # --kill-child: if unshare itself is killed, the node's init gets SIGTERM and stops slurmd.
    setsid nsenter --net="/run/netns/$ns" unshare --uts --pid --mount --fork --kill-child=SIGTERM \
        --mount-proc --propagation private "$DIR/node-init.sh" "$name" "$DIR/hosts" "$CONF" \
        </dev/null >>"$DIR/log/$name-init.log" 2>&1 &
    upid=$!
    for _ in $(seq 50); do
        init=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null | xargs || true)
        [ -n "$init" ] && break
        sleep 0.1
    done
    [ -n "$init" ] || fail_start "$name's init" "$DIR/log/$name-init.log"
    echo "$init" >"$PIDS/$name.pid"
    for _ in $(seq 50); do
        [ -s "$DIR/spool/$name/slurmd.pid" ] && return 0
        live_node "$name" >/dev/null || break
        sleep 0.1
    done
    fail_start "slurmd on $name" "$DIR/log/slurmd-$name.log"
}

stop_node() {
    local name=$1 pid
    if pid=$(live_node "$name"); then
        kill -TERM "$pid"  # its trap stops slurmd; its exit kills the rest of the node
        for _ in $(seq 100); do
            [ -d "/proc/$pid" ] || break
            sleep 0.1
        done
        [ -d "/proc/$pid" ] && kill -KILL "$pid"
        say "stopped $name (init pid $pid)"
    fi
    rm -f "$PIDS/$name.pid" "$DIR/spool/$name/slurmd.pid"
    if [ -e "/run/netns/evk-$name" ]; then ip netns del "evk-$name"; fi  # its veth goes with it
    ip link del "evk-$name-h" 2>/dev/null || true  # gone already, unless the namespace was
}

# Every process on node $1 except its init (pid 1), slurmd and this ps, with the node's own pids;
# nothing printed: nothing is left on the node.
cmd_ps() {
    local name=${1:-} pid
    [[ " ${NODE_NAMES[*]} " == *" $name "* ]] || die 2 "usage: $0 ps node1|node2"
    pid=$(live_node "$name") || die 1 "$name is not running"
    nsenter -t "$pid" -p -m ps -eo pid=,ppid=,stat=,args= | awk '$1 != 1 && $2 != 0 && $4 != "/usr/sbin/slurmd"'  # ppid 0: this ps, entered from outside
}

# --- commands ------------------------------------------------------------------------------------

cmd_start() {
    local nodes=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) nodes=${2:-}; shift 2 || true ;;
            --nodes=*) nodes=${1#--nodes=}; shift ;;
            *) die 2 "start: unknown argument '$1' (usage: start [--nodes 1|2])" ;;
        esac
    done
    [[ "$nodes" == 1 || "$nodes" == 2 ]] || die 2 "start: --nodes must be 1 or 2, not '$nodes'"
    [ "$(id -u)" -eq 0 ] || die 3 "needs root (slurmd runs jobs as their users; munged as munge)"
    if live_pid slurmctld slurmctld >/dev/null && [ "$(cat "$SHAPE" 2>/dev/null || echo 1)" != "$nodes" ]; then
        die 2 "a $(cat "$SHAPE" 2>/dev/null || echo 1)-node cluster is running in $DIR; stop it first"
    fi
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$PIDS"
    install_packages
    write_conf "$nodes"
    echo "$nodes" >"$SHAPE"
    start_munge
    start_slurm_daemon slurmctld
    if [ "$nodes" -eq 1 ]; then
        start_slurm_daemon slurmd
    else
        command -v unshare >/dev/null && command -v nsenter >/dev/null && command -v ip >/dev/null \
            || die 3 "two nodes need ip (iproute2), unshare and nsenter (util-linux)"
        write_node_init
        make_bridge
        start_node node1 1
        start_node node2 2
    fi
    wait_idle "$nodes"
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
    local name
    for name in "${NODE_NAMES[@]}"; do stop_node "$name"; done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
    stop_one slurmctld slurmctld
    stop_one munge/munged munged
    rm -f "$SHAPE"
}

cmd_status() {
    local rc=0 pid name entries=(munge/munged:munged slurmctld:slurmctld)
    [ "$(cat "$SHAPE" 2>/dev/null || echo 1)" = 2 ] || entries+=(slurmd:slurmd)
    for entry in "${entries[@]}"; do
        if pid=$(live_pid "${entry%%:*}" "${entry##*:}"); then
            echo "${entry##*:}: running (pid $pid)"
        else
            echo "${entry##*:}: not running"
            rc=1
        fi
    done
    if [ "$(cat "$SHAPE" 2>/dev/null || echo 1)" = 2 ]; then
        for name in "${NODE_NAMES[@]}"; do
            if pid=$(live_node "$name"); then
                echo "$name: running (init pid $pid, $SUBNET.1${name#node})"
            else
                echo "$name: not running"
                rc=1
            fi
        done
    fi
    if [ $rc -eq 0 ]; then
        sinfo
        squeue
    fi
    return $rc
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    ps) cmd_ps "${2:-}" ;;
    *) echo "usage: $0 start [--nodes 1|2]|stop|status|env|ps NODE" >&2; exit 2 ;;
esac
