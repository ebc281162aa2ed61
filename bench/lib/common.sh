# shellcheck shell=bash
# Process, port and /proc helpers for bench/run. Every process bench/run
# starts is recorded in STARTED and stopped by its PID, never by name.

STARTED=()

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# free_ports N prints N distinct free TCP ports on 127.0.0.1, one a line.
# All N sockets are held until every one is bound, so they differ.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# wait_port PORT [SECONDS]: wait until 127.0.0.1:PORT accepts.
wait_port() {
    local port=$1 limit=${2:-10} i
    for ((i = 0; i < limit * 20; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# start_bg LOGFILE CMD...: start CMD in the background, record its PID in
# STARTED and in the global LAST_PID.
start_bg() {
    local logf=$1
    shift
    "$@" >"$logf" 2>&1 &
    LAST_PID=$!
    STARTED+=("$LAST_PID")
}

# stop_pid PID: SIGTERM, then SIGKILL after 5 s; reaps it.
stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        # A zombie child of ours counts as gone once waited for.
        if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            break
        fi
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local keep=() p
    for p in "${STARTED[@]}"; do
        [ "$p" = "$pid" ] || keep+=("$p")
    done
    STARTED=("${keep[@]+"${keep[@]}"}")
}

# stop_all stops every process bench/run started, newest first.
stop_all() {
    local i
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        stop_pid "${STARTED[$i]}"
    done
}

# proc_tree PID prints PID and its direct children (nginx's master and
# workers; strait and HAProxy are one process with threads).
proc_tree() {
    echo "$1"
    pgrep -P "$1" || true
}

# cpu_ticks PID...: utime+stime summed over the processes (each process's
# figure already covers all its threads), in clock ticks.
cpu_ticks() {
    local p sum=0 t
    for p in "$@"; do
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        sum=$((sum + t))
    done
    echo "$sum"
}

# rss_kb PID...: VmRSS summed over the processes, in KiB.
rss_kb() {
    local p sum=0 r
    for p in "$@"; do
        r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
        sum=$((sum + ${r:-0}))
    done
    echo "$sum"
}
