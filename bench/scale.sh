#!/usr/bin/env bash
# bench/scale.sh: how the configuration's cost grows with the number of
# tenants (issue 27). One Gateway (hosts ["*"]) and N tenants, each a
# VirtualService (one host; a path prefix, a header match, a default
# route), a ServiceEntry (2 STATIC endpoints) and a DestinationRule (2
# subsets); beside it nginx with N server blocks and HAProxy with an
# N-entry host map (bench/lib/scale_gen.py writes all three).
#
# For each N it measures, with /usr/bin/time, the CPU user time and peak
# RSS of `strait check`, `nginx -t` and `haproxy -c`, and, for each
# server, start to ready: strait until GET /healthz/ready is 200, nginx
# and HAProxy until their port accepts; the CPU time spent by then and
# the peak RSS (VmHWM, summed over nginx's master and worker). CPU time,
# not wall time, is the figure: on a shared machine wall time is mostly
# waiting for a core. A request for the last tenant is sent to strait
# to show it routes (any answer but 404: the endpoints do not listen).
# nginx or HAProxy missing (and --no-install): their columns are "-".
set -euo pipefail

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh
. "$BENCH/lib/common.sh"
# shellcheck source=lib/build.sh
. "$BENCH/lib/build.sh"

SIZES="1000 10000 50000"
INSTALL=1
KEEP=0
READY_LIMIT=1200

usage() {
    cat <<'USAGE'
usage: bench/scale.sh [options]
  --sizes "N..."      tenant counts (default: "1000 10000 50000")
  --strait PATH       use this strait binary instead of building one
  --no-install        do not apt-get nginx and haproxy when missing
  --ready-limit S     give up on a start after S seconds (default: 1200)
  --keep              keep the scratch directory
USAGE
}

while [ $# -gt 0 ]; do
    case $1 in
        --sizes) SIZES=$2; shift ;;
        --strait) STRAIT_BIN=$2; shift ;;
        --no-install) INSTALL=0 ;;
        --ready-limit) READY_LIMIT=$2; shift ;;
        --keep) KEEP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done

WORK=$(mktemp -d /tmp/strait-scale.XXXXXX)
cleanup() {
    stop_all
    if [ "$KEEP" = 1 ]; then log "scratch kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [ "$INSTALL" = 1 ] && { ! command -v nginx >/dev/null || ! command -v haproxy >/dev/null; }; then
    apt-get install -y nginx-light haproxy >/dev/null || log "could not install nginx/haproxy"
fi
[ -x /usr/bin/time ] || die "/usr/bin/time is needed (apt-get install time)"
strait_build

# timed OUT CMD...: runs CMD; OUT gets "user_s maxrss_kib exit".
timed() {
    local out=$1 rc=0
    shift
    /usr/bin/time -o "$out.time" -f "%U %M" "$@" >"$out.log" 2>&1 || rc=$?
    echo "$(tail -1 "$out.time") $rc" >"$out"
}

# hwm_kb PID...: peak RSS (VmHWM) summed over the processes, in KiB.
hwm_kb() {
    local p sum=0 r
    for p in "$@"; do
        r=$(awk '/^VmHWM:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
        sum=$((sum + ${r:-0}))
    done
    echo "$sum"
}

# ready_strait ADMIN PID: wait for /healthz/ready (or the process's end).
ready_strait() {
    local admin=$1 pid=$2 i
    for ((i = 0; i < READY_LIMIT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/healthz/ready")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}

# fmt_s TICKS: clock ticks as seconds.
fmt_s() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }

# strait_row N: "check_user check_mib ready_wall ready_cpu ready_mib last"
strait_row() {
    local n=$1 d="$WORK/strait-$1" port up admin t0 t1 pid c u m rc code
    read -r port up admin < <(free_ports 3 | paste -sd' ')
    python3 "$BENCH/lib/scale_gen.py" strait "$n" "$port" "$up" "$d/conf"
    cat >"$d/strait.yaml" <<CONF
workers: 1
admin: {address: 127.0.0.1:$admin}
log: {level: warn, accessLog: false}
config: {dir: "$d/conf"}
CONF
    timed "$d/check" "$STRAIT_BIN" check -c "$d/strait.yaml" "$d/conf"
    read -r u m rc <"$d/check"
    [ "$rc" = 0 ] || { log "strait check failed at N=$n: $(tail -2 "$d/check.log")"; u="fail"; }
    c="$u $(mib "$m")"
    t0=$(date +%s%N)
    start_bg "$d/run.log" "$STRAIT_BIN" run -c "$d/strait.yaml"
    pid=$LAST_PID
    if ready_strait "$admin" "$pid"; then
        t1=$(date +%s%N)
        c="$c $(awk -v t=$((t1 - t0)) 'BEGIN { printf "%.1f", t / 1e9 }') $(fmt_s "$(cpu_ticks "$pid")") $(mib "$(hwm_kb "$pid")")"
        code=$(curl -s -o /dev/null -w '%{http_code}' -H "host: t$((n - 1)).example.com" "http://127.0.0.1:$port/")
        c="$c $code"
    else
        log "strait did not become ready at N=$n: $(tail -2 "$d/run.log")"
        c="$c fail - $(mib "$(hwm_kb "$pid")") -"
    fi
    stop_pid "$pid"
    echo "$c"
}

# nginx_row N: "t_user t_mib start_cpu start_mib", or dashes.
nginx_row() {
    local n=$1 d="$WORK/nginx-$1" port up pid u m rc
    command -v nginx >/dev/null || { echo "- - - -"; return; }
    read -r port up < <(free_ports 2 | paste -sd' ')
    python3 "$BENCH/lib/scale_gen.py" nginx "$n" "$port" "$up" "$d"
    timed "$d/t" nginx -t -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
    read -r u m rc <"$d/t"
    [ "$rc" = 0 ] || { log "nginx -t failed at N=$n: $(tail -2 "$d/t.log")"; u=fail; }
    start_bg "$d/run.log" nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf" -g 'daemon off;'
    pid=$LAST_PID
    if wait_port "$port" "$READY_LIMIT"; then
        # shellcheck disable=SC2046
        echo "$u $(mib "$m") $(fmt_s "$(cpu_ticks $(proc_tree "$pid"))") $(mib "$(hwm_kb $(proc_tree "$pid"))")"
    else
        echo "$u $(mib "$m") fail -"
    fi
    stop_pid "$pid"
}

# haproxy_row N: as nginx_row.
haproxy_row() {
    local n=$1 d="$WORK/haproxy-$1" port up pid u m rc
    command -v haproxy >/dev/null || { echo "- - - -"; return; }
    read -r port up < <(free_ports 2 | paste -sd' ')
    python3 "$BENCH/lib/scale_gen.py" haproxy "$n" "$port" "$up" "$d"
    timed "$d/c" haproxy -c -f "$d/haproxy.cfg"
    read -r u m rc <"$d/c"
    [ "$rc" = 0 ] || { log "haproxy -c failed at N=$n: $(tail -2 "$d/c.log")"; u=fail; }
    start_bg "$d/run.log" haproxy -db -f "$d/haproxy.cfg"
    pid=$LAST_PID
    if wait_port "$port" "$READY_LIMIT"; then
        echo "$u $(mib "$m") $(fmt_s "$(cpu_ticks "$pid")") $(mib "$(hwm_kb "$pid")")"
    else
        echo "$u $(mib "$m") fail -"
    fi
    stop_pid "$pid"
}

printf '| N | strait check CPU s | check MiB | strait ready wall s | ready CPU s | ready MiB | last tenant | nginx -t CPU s | nginx -t MiB | nginx start CPU s | nginx MiB | haproxy -c CPU s | haproxy -c MiB | haproxy start CPU s | haproxy MiB |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for n in $SIZES; do
    s=$(strait_row "$n")
    g=$(nginx_row "$n")
    h=$(haproxy_row "$n")
    # shellcheck disable=SC2086
    printf '| %s |%s|\n' "$n" "$(printf ' %s |' $s $g $h | sed 's/|$//')"
    rm -rf "$WORK/strait-$n" "$WORK/nginx-$n" "$WORK/haproxy-$n"
done
