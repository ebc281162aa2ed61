# shellcheck shell=bash
# Configurations and start/stop of the upstream and the three proxies.
# Needs common.sh. Globals in: WORK (scratch dir), STRAIT_BIN,
# STRAIT_BASE_BIN (the base and base-gw proxies: a second strait binary
# measured the same way, for before/after in one run), UP_WORKERS,
# IDLE_MAX (largest idle connection count, sizes connection limits).
# Each proxy gets the same shape: a plaintext HTTP port (P_PLAIN), a TLS
# port with ALPN h2,http/1.1 and TLS 1.2-1.3 (P_TLS), a TCP relay port
# (P_TCP), N workers, keep-alive to the upstream, no access log. strait
# is measured twice: through its bootstrap listeners (strait) and through
# a Gateway + VirtualService + ServiceEntry in config.dir (strait-gw);
# base and base-gw are the same two with STRAIT_BASE_BIN.

NGINX_STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so

# make_cert writes one ECDSA P-256 certificate for all servers.
make_cert() {
    CERT=$WORK/cert.pem KEY=$WORK/key.pem COMBINED=$WORK/combined.pem
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$KEY" -out "$CERT" -days 2 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1 \
        || die "openssl could not make the certificate"
    cat "$CERT" "$KEY" >"$COMBINED"
}

# nginx_user prints the user directive when we are root (nginx's workers
# would otherwise drop to nobody and lose access to the scratch dir).
nginx_user() {
    if [ "$(id -u)" -eq 0 ]; then echo "user root;"; fi
}

# upstream_start starts the one fixed upstream: nginx serving /64, /16k
# and /1m from files, plaintext on UP_PLAIN and TLS+h2 on UP_TLS (the TLS
# port is only used for the direct rows), and plaintext on HB_IP and WL_IP
# too when they are set (the hbone scenario's endpoints). Sets UP_PID.
upstream_start() {
    local d=$WORK/upstream
    mkdir -p "$d/www" "$d/tmp"
    head -c 64 /dev/zero | tr '\0' a >"$d/www/64"
    head -c 16384 /dev/zero | tr '\0' b >"$d/www/16k"
    head -c 1048576 /dev/zero | tr '\0' c >"$d/www/1m"
    read -r UP_PLAIN UP_TLS < <(free_ports 2 | paste -sd' ')
    cat >"$d/nginx.conf" <<CONF
$(nginx_user)
daemon off;
master_process on;
worker_processes $UP_WORKERS;
worker_rlimit_nofile 20000;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 19000; multi_accept on; }
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    open_file_cache max=16 inactive=1h;
    open_file_cache_valid 1h;
    keepalive_requests 100000000;
    keepalive_timeout 3600s;
    http2_max_concurrent_streams 128;
    client_body_temp_path $d/tmp; proxy_temp_path $d/tmp;
    fastcgi_temp_path $d/tmp; uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
    server {
        listen 127.0.0.1:$UP_PLAIN reuseport backlog=4096;
        listen 127.0.0.1:$UP_TLS ssl http2 reuseport backlog=4096;
$(for ip in ${HB_IP:-} ${WL_IP:-}; do echo "        listen $ip:$UP_PLAIN reuseport backlog=4096;"; done)
        ssl_certificate $CERT;
        ssl_certificate_key $KEY;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $d/www;
        location / { }
    }
}
CONF
    start_bg "$d/stderr.log" nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
    UP_PID=$LAST_PID
    wait_port "$UP_PLAIN" 10 && wait_port "$UP_TLS" 10 \
        || die "upstream nginx did not start: $(tail -n 5 "$d/error.log" "$d/stderr.log")"
}

# proxy_ports picks fresh ports for the next proxy.
proxy_ports() {
    read -r P_PLAIN P_TLS P_TCP P_ADMIN < <(free_ports 4 | paste -sd' ')
}

# strait_resources DIR: the Gateway, VirtualServices and ServiceEntry
# of the strait-gw mode, in DIR/bench.yaml, the way users configure an
# Istio gateway: a Gateway selecting this node by its labels (an HTTP
# server on G_PLAIN, an HTTPS server on G_TLS whose certificate comes from
# credentials.dir through credentialName, a TCP server on G_TCP), one
# VirtualService routing every host to the upstream's ServiceEntry host,
# one relaying the TCP server to it, and the ServiceEntry: host
# upstream.bench.internal, port 80, resolution STATIC, one endpoint
# 127.0.0.1:UP_PLAIN.
strait_resources() {
    cat >"$1/bench.yaml" <<CONF
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: bench, namespace: istio-system}
spec:
  selector: {app: strait-bench}
  servers:
  - port: {number: $G_PLAIN, name: http, protocol: HTTP}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {number: $G_TLS, name: https, protocol: HTTPS}
    bind: 127.0.0.1
    hosts: ["*"]
    tls:
      mode: SIMPLE
      credentialName: bench-cert
      minProtocolVersion: TLSV1_2
      maxProtocolVersion: TLSV1_3
  - port: {number: $G_TCP, name: tcp, protocol: TCP}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: upstream, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [bench]
  http:
  - route:
    - destination: {host: upstream.bench.internal, port: {number: 80}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: upstream-tcp, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [bench]
  tcp:
  - match: [{port: $G_TCP}]
    route:
    - destination: {host: upstream.bench.internal, port: {number: 80}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: upstream, namespace: istio-system}
spec:
  hosts: [upstream.bench.internal]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints:
  - {address: 127.0.0.1, ports: {http: $UP_PLAIN}}
CONF
}

# strait_start NAME WORKERS MODE BIN: writes $WORK/NAME/strait.yaml and
# the resources of config.dir, and runs strait binary BIN. One
# configuration serves both modes side by side: the bootstrap listeners
# (plain, tls, tcp; cluster up) and the Gateway's three servers. MODE
# picks which ports the scenarios use: bootstrap (P_* = the bootstrap
# listeners) or gateway (P_* = the Gateway's servers). Sets STRAIT_LISTENERS to the listener
# names readiness waits for in /stats.
strait_start() {
    local d=$WORK/$1 w=$2 mode=$3 bin=$4
    mkdir -p "$d/conf" "$d/creds/bench-cert"
    cp "$CERT" "$d/creds/bench-cert/tls.crt"
    cp "$KEY" "$d/creds/bench-cert/tls.key"
    read -r B_PLAIN B_TLS B_TCP G_PLAIN G_TLS G_TCP P_ADMIN \
        < <(free_ports 7 | paste -sd' ')
    strait_resources "$d/conf"
    case $1 in
        *-gw-lua) cat >"$d/conf/lua.yaml" <<CONF ;;
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: noop, namespace: istio-system}
spec:
  source: {file: examples/noop.lua}
CONF
        *-gw-rl) cat >"$d/conf/lua.yaml" <<CONF ;;
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: ratelimit, namespace: istio-system}
spec:
  sharedDicts: [{name: ratelimit, size: 16Mi}]
  config: {rate: "1e9", burst: "1e9"}
  source: {file: examples/rate_limit.lua}
CONF
    esac
    cat >"$d/strait.yaml" <<CONF
workers: $w
node:
  namespace: istio-system
  labels: {app: strait-bench}
admin:
  address: 127.0.0.1:$P_ADMIN
log:
  level: warn
  accessLog: false
metrics:
  enabled: $(case $1 in *-nm) echo false ;; *) echo true ;; esac)
drainTimeout: 1s
config:
  dir: $d/conf
credentials:
  dir: $d/creds
lua:
  path: [$TOP/lua]
listeners:
  - name: plain
    address: 127.0.0.1:$B_PLAIN
    protocol: http
    routes: [{host: "*", pathPrefix: /, cluster: up}]
  - name: tls
    address: 127.0.0.1:$B_TLS
    protocol: http
    tls:
      certificates:
        - serverCertificate: $CERT
          privateKey: $KEY
      minProtocolVersion: TLSV1_2
      maxProtocolVersion: TLSV1_3
      alpn: [h2, http/1.1]
    routes: [{host: "*", pathPrefix: /, cluster: up}]
  - name: tcp
    address: 127.0.0.1:$B_TCP
    protocol: tcp
    upstreams: [127.0.0.1:$UP_PLAIN]
    backlog: 4096
clusters:
  - name: up
    endpoints: [127.0.0.1:$UP_PLAIN]
    protocol: http1
CONF
    STRAIT_LISTENERS="plain tls tcp"
    for p in "$G_PLAIN" "$G_TLS" "$G_TCP"; do
        STRAIT_LISTENERS+=" gateway-127.0.0.1-$p"
    done
    if [ "$mode" = gateway ]; then
        P_PLAIN=$G_PLAIN P_TLS=$G_TLS P_TCP=$G_TCP
    else
        P_PLAIN=$B_PLAIN P_TLS=$B_TLS P_TCP=$B_TCP
    fi
    "$bin" check -c "$d/strait.yaml" >"$d/check.log" 2>&1 \
        || die "strait check refused the config: $(cat "$d/check.log")"
    start_bg "$d/stderr.log" "$bin" run -c "$d/strait.yaml"
    PROXY_PID=$LAST_PID
}

# strait_ready SECONDS [PID ADMIN]: waits, through the admin API, until strait says
# it is ready (GET /healthz/ready is 200 with no failed resource load) and
# every listener of STRAIT_LISTENERS is in /stats. Listeners are bound
# before the admin API answers its first request, so this is the moment
# the ports accept. Polls every 50 ms; fails when strait exits or after
# SECONDS. PID and ADMIN (the admin port) default to PROXY_PID and
# P_ADMIN.
strait_ready() {
    local limit=$1 pid=${2:-$PROXY_PID} admin=${3:-$P_ADMIN} i ready stats name missing
    for ((i = 0; i < limit * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        ready=$(curl -s -m 1 -w '%{http_code}' "http://127.0.0.1:$admin/healthz/ready" || true)
        if [ "${ready: -3}" = 200 ] && ! grep -q 'failed' <<<"$ready"; then
            stats=$(curl -s -m 1 "http://127.0.0.1:$admin/stats" || true)
            missing=0
            for name in $STRAIT_LISTENERS; do
                grep -q "^listener\.$name\.downstream_cx_total: " <<<"$stats" \
                    || { missing=1; break; }
            done
            [ "$missing" = 0 ] && return 0
        fi
        sleep 0.05
    done
    return 1
}

# PROXY_WRAP: a command nginx and haproxy are started under (bench/instr
# runs them under callgrind); empty: none.
PROXY_WRAP=${PROXY_WRAP:-}
# NGINX_MASTER=off: nginx as one process with no master (bench/instr:
# callgrind then sees the process that serves).
NGINX_MASTER=${NGINX_MASTER:-on}

# haproxy_start WORKERS: one process, WORKERS threads. The open-file limit
# (20,000) is below what maxconn would ask for, hence no strict-limits.
haproxy_start() {
    local w=$1 d=$WORK/haproxy
    mkdir -p "$d"
    proxy_ports
    cat >"$d/haproxy.cfg" <<CONF
global
    nbthread $w
    maxconn $((IDLE_MAX + 2000))
    no strict-limits
    tune.ssl.default-dh-param 2048
    ssl-default-bind-options ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout http-request 10s
    timeout http-keep-alive 1h
    maxconn $((IDLE_MAX + 2000))
frontend plain
    bind 127.0.0.1:$P_PLAIN backlog 4096
    bind 127.0.0.1:$P_TLS ssl crt $COMBINED alpn h2,http/1.1 backlog 4096
    default_backend up
backend up
    http-reuse always
    server up1 127.0.0.1:$UP_PLAIN
listen tcp
    mode tcp
    bind 127.0.0.1:$P_TCP backlog 4096
    server up1 127.0.0.1:$UP_PLAIN
CONF
    haproxy -c -f "$d/haproxy.cfg" >"$d/check.log" 2>&1 \
        || die "haproxy refused the config: $(cat "$d/check.log")"
    # shellcheck disable=SC2086 # PROXY_WRAP is a command and its options
    start_bg "$d/stderr.log" $PROXY_WRAP haproxy -db -f "$d/haproxy.cfg"
    PROXY_PID=$LAST_PID
}

# nginx_start WORKERS: master plus WORKERS worker processes. The TCP relay
# needs the stream module (libnginx-mod-stream); without it P_TCP is 0.
nginx_start() {
    local w=$1 d=$WORK/nginx stream="" load=""
    mkdir -p "$d/tmp"
    proxy_ports
    if [ -f "$NGINX_STREAM_MODULE" ]; then
        load="load_module $NGINX_STREAM_MODULE;"
        stream="stream {
    upstream tcpup { server 127.0.0.1:$UP_PLAIN; }
    server { listen 127.0.0.1:$P_TCP reuseport backlog=4096; proxy_pass tcpup; }
}"
    else
        P_TCP=0
    fi
    cat >"$d/nginx.conf" <<CONF
$load
$(nginx_user)
daemon off;
master_process $NGINX_MASTER;
worker_processes $w;
worker_rlimit_nofile 20000;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 19000; multi_accept on; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 3600s;
    http2_max_concurrent_streams 100;
    client_body_temp_path $d/tmp; proxy_temp_path $d/tmp;
    fastcgi_temp_path $d/tmp; uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
    upstream up {
        server 127.0.0.1:$UP_PLAIN;
        keepalive 64;
        keepalive_requests 100000000;
        keepalive_timeout 3600s;
    }
    server {
        listen 127.0.0.1:$P_PLAIN reuseport backlog=4096;
        listen 127.0.0.1:$P_TLS ssl http2 reuseport backlog=4096;
        ssl_certificate $CERT;
        ssl_certificate_key $KEY;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # Stream big bodies through memory, never through temp files.
            proxy_max_temp_file_size 0;
        }
    }
}
$stream
CONF
    nginx -t -p "$d" -e "$d/error.log" -c "$d/nginx.conf" >"$d/check.log" 2>&1 \
        || die "nginx refused the config: $(cat "$d/check.log")"
    # shellcheck disable=SC2086 # PROXY_WRAP is a command and its options
    start_bg "$d/stderr.log" $PROXY_WRAP nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
    PROXY_PID=$LAST_PID
}

# proxy_start NAME WORKERS starts a proxy and waits for its ports; for
# "direct" it points the P_* ports at the upstream itself.
proxy_start() {
    local name=$1 w=$2
    case $name in
        direct)
            P_PLAIN=$UP_PLAIN P_TLS=$UP_TLS P_TCP=$UP_PLAIN PROXY_PID=$UP_PID
            return 0 ;;
        strait | strait-gw | base | base-gw | strait-nm | strait-gw-nm | strait-gw-lua | strait-gw-rl)
            local mode=bootstrap bin=$STRAIT_BIN
            case $name in *-gw | *-gw-nm | *-gw-lua | *-gw-rl) mode=gateway ;; esac
            case $name in base*) bin=$STRAIT_BASE_BIN ;; esac
            strait_start "$name" "$w" "$mode" "$bin"
            if ! strait_ready 20; then
                log "$name is not ready: $(tail -n 5 "$WORK/$name/stderr.log" 2>/dev/null)"
                return 1
            fi
            return 0 ;;
        haproxy) haproxy_start "$w" ;;
        nginx) nginx_start "$w" ;;
        *) die "unknown proxy $name" ;;
    esac
    local p
    for p in "$P_PLAIN" "$P_TLS" "$P_TCP"; do
        [ "$p" = 0 ] && continue
        if ! wait_port "$p" 10; then
            log "$name did not open port $p: $(tail -n 5 "$WORK/$name/stderr.log" 2>/dev/null)"
            return 1
        fi
    done
    # nginx's workers may still be starting when the master listens.
    sleep 0.2
}

# proxy_stop stops the current proxy (never the upstream).
proxy_stop() {
    [ "$PROXY_PID" = "$UP_PID" ] || stop_pid "$PROXY_PID"
}

# --- HBONE (the hbone scenario; strait only) -------------------------------
#
# Three ways to the same upstream, each through a TCP Gateway server of
# strait, so that their MiB per CPU-second compare directly:
#   relay:  a plain TCP relay to a ServiceEntry endpoint 127.0.0.1:UP_PLAIN
#           (process H);
#   hbone:  to an ambient endpoint HB_IP:UP_PLAIN, so through one HBONE
#           tunnel (mTLS + HTTP/2 CONNECT) to HB_IP:15008, where an HBONE
#           Gateway server of the same process H ends it and connects to
#           the upstream: client and server in one process;
#   hbone2: double HBONE between two processes: A (network net-a, joined
#           to B's CA) sends to an endpoint on net-b, whose meshNetworks
#           gateway is B's east-west HBONE server on EW_IP:15008; B relays
#           the inner stream to its own workload HBONE server on
#           WL_IP:15008, which ends it and connects to WL_IP:UP_PLAIN.
# The upstream nginx also listens on HB_IP and WL_IP (hbone_ips).

# loopback_ip [IP...]: prints a 127.x.y.z address, none of the arguments,
# with port 15008 free on it.
loopback_ip() {
    python3 - "$@" <<'PY'
import random, socket, sys
for _ in range(200):
    ip = "127.%d.%d.%d" % (random.randint(20, 250), random.randint(1, 250),
                           random.randint(1, 250))
    if ip in sys.argv[1:]:
        continue
    s = socket.socket()
    try:
        s.bind((ip, 15008))
    except OSError:
        continue
    finally:
        s.close()
    print(ip)
    sys.exit(0)
sys.exit("no free 127.x.y.z:15008")
PY
}

# hbone_ips picks HB_IP, EW_IP and WL_IP (see above).
hbone_ips() {
    HB_IP=$(loopback_ip) || die "no free 127.x.y.z:15008"
    EW_IP=$(loopback_ip "$HB_IP") || die "no free 127.x.y.z:15008"
    WL_IP=$(loopback_ip "$HB_IP" "$EW_IP") || die "no free 127.x.y.z:15008"
}

# hbone_h_start WORKERS: process H (relay and hbone), with the embedded
# CA (`strait ca init`), in a fresh $WORK/hbone-h. Sets H_PID, H_ADMIN,
# HP_RELAY and HP_HBONE (the TCP servers of the two ways). Returns 1 when
# it does not become ready.
hbone_h_start() {
    local w=$1 d=$WORK/hbone-h ca_port
    H_PID=""
    rm -rf "$d"
    mkdir -p "$d/conf"
    read -r HP_RELAY HP_HBONE H_ADMIN ca_port < <(free_ports 4 | paste -sd' ')
    cat >"$d/conf/bench.yaml" <<CONF
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {}
  servers:
  - port: {number: $HP_RELAY, name: relay, protocol: TCP}
    bind: 127.0.0.1
    hosts: ["*"]
  - port: {number: $HP_HBONE, name: hbone-client, protocol: TCP}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: hbone, namespace: istio-system}
spec:
  selector: {}
  servers:
  - port: {number: 15008, name: hbone, protocol: HBONE}
    bind: $HB_IP
    hosts: ["*/*.bench.internal"]
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: istio-system}
spec:
  hosts: ["*"]
  gateways: [edge]
  tcp:
  - match: [{port: $HP_RELAY}]
    route: [{destination: {host: plain.bench.internal, port: {number: 80}}}]
  - match: [{port: $HP_HBONE}]
    route: [{destination: {host: ambient.bench.internal, port: {number: 80}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: plain, namespace: istio-system}
spec:
  hosts: [plain.bench.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: tcp, protocol: TCP}]
  endpoints:
  - {address: 127.0.0.1, ports: {tcp: $UP_PLAIN}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ambient, namespace: istio-system}
spec:
  hosts: [ambient.bench.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: tcp, protocol: TCP}]
  endpoints:
  - address: $HB_IP
    ports: {tcp: $UP_PLAIN}
    serviceAccount: strait
    labels: {istio.io/dataplane-mode: ambient}
CONF
    cat >"$d/strait.yaml" <<CONF
workers: $w
node: {namespace: istio-system}
admin: {address: 127.0.0.1:$H_ADMIN}
log: {level: warn, accessLog: false}
drainTimeout: 1s
config: {dir: $d/conf}
ca: {enabled: true, dir: $d/ca, address: 127.0.0.1:$ca_port}
CONF
    timeout 30 "$STRAIT_BIN" ca init -c "$d/strait.yaml" >"$d/ca-init.log" 2>&1 \
        || { log "hbone: strait ca init failed: $(tail -n 5 "$d/ca-init.log")"; return 1; }
    start_bg "$d/stderr.log" "$STRAIT_BIN" run -c "$d/strait.yaml"
    H_PID=$LAST_PID
    STRAIT_LISTENERS="gateway-127.0.0.1-$HP_RELAY gateway-127.0.0.1-$HP_HBONE gateway-$HB_IP-15008"
    strait_ready 20 "$H_PID" "$H_ADMIN" \
        || { log "hbone: H is not ready: $(tail -n 5 "$d/stderr.log")"; return 1; }
}

# The east-west gateway's (and the workload end's) identity: B's node.
HBONE_B_ID=spiffe://example.org/ns/istio-system/sa/strait

# hbone_ab_start WORKERS: processes B (the CA, the east-west gateway and
# the workload's tunnel end) and A (joined to B's CA with a fresh token,
# the double HBONE client), in fresh $WORK/hbone-a and hbone-b. Sets A_PID,
# B_PID, B_ADMIN and HP_DOUBLE (A's TCP server). Returns 1 when either does not
# become ready.
hbone_ab_start() {
    local w=$1 a=$WORK/hbone-a b=$WORK/hbone-b a_admin ca_port tok
    A_PID="" B_PID=""
    rm -rf "$a" "$b"
    mkdir -p "$a/conf" "$b/conf"
    read -r HP_DOUBLE a_admin B_ADMIN ca_port < <(free_ports 4 | paste -sd' ')
    cat >"$b/conf/bench.yaml" <<CONF
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: eastwest, namespace: istio-system}
spec:
  selector: {}
  servers:
  - port: {number: 15008, name: hbone, protocol: HBONE}
    bind: $EW_IP
    hosts: ["*/*.bench.internal"]
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ztunnel, namespace: istio-system}
spec:
  selector: {}
  servers:
  - port: {number: 15008, name: hbone, protocol: HBONE}
    bind: $WL_IP
    hosts: ["*/*.bench.internal"]
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: istio-system}
spec:
  hosts: [svc.bench.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: tcp, protocol: TCP}]
  endpoints:
  - address: $WL_IP
    ports: {tcp: $UP_PLAIN}
    labels: {istio.io/dataplane-mode: ambient}
CONF
    cat >"$b/strait.yaml" <<CONF
workers: $w
trustDomain: example.org
node: {network: net-b}
admin: {address: 127.0.0.1:$B_ADMIN}
log: {level: warn, accessLog: false}
drainTimeout: 1s
config: {dir: $b/conf}
ca: {enabled: true, dir: $b/ca, address: 127.0.0.1:$ca_port}
CONF
    timeout 30 "$STRAIT_BIN" ca init -c "$b/strait.yaml" >"$b/ca-init.log" 2>&1 \
        || { log "hbone2: strait ca init failed: $(tail -n 5 "$b/ca-init.log")"; return 1; }
    start_bg "$b/stderr.log" "$STRAIT_BIN" run -c "$b/strait.yaml"
    B_PID=$LAST_PID
    STRAIT_LISTENERS="gateway-$EW_IP-15008 gateway-$WL_IP-15008"
    strait_ready 20 "$B_PID" "$B_ADMIN" \
        || { log "hbone2: B is not ready: $(tail -n 5 "$b/stderr.log")"; return 1; }
    tok=$(timeout 30 "$STRAIT_BIN" ca token create --namespace team \
        --service-account caller --ttl 1h -c "$b/strait.yaml" 2>"$b/token.log") \
        || { log "hbone2: no join token: $(tail -n 5 "$b/token.log")"; return 1; }
    cat >"$a/conf/bench.yaml" <<CONF
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: team}
spec:
  selector: {}
  servers:
  - port: {number: $HP_DOUBLE, name: tcp, protocol: TCP}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: out, namespace: team}
spec:
  hosts: ["*"]
  gateways: [edge]
  tcp:
  - route: [{destination: {host: svc.bench.internal, port: {number: 80}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc, namespace: team}
spec:
  hosts: [svc.bench.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: tcp, protocol: TCP}]
  subjectAltNames: ["$HBONE_B_ID"]
  endpoints:
  - {address: 10.20.0.5, network: net-b}
CONF
    cat >"$a/strait.yaml" <<CONF
workers: $w
trustDomain: example.org
node: {namespace: team, serviceAccount: caller, network: net-a}
admin: {address: 127.0.0.1:$a_admin}
log: {level: warn, accessLog: false}
drainTimeout: 1s
config: {dir: $a/conf}
ca: {dir: $a/state}
meshNetworks:
  networks:
    net-b: {gateways: [{address: $EW_IP, port: 15008, identity: "$HBONE_B_ID"}]}
CONF
    start_bg "$a/stderr.log" "$STRAIT_BIN" run -c "$a/strait.yaml" \
        --join "https://127.0.0.1:$ca_port" --token "$tok"
    A_PID=$LAST_PID
    STRAIT_LISTENERS="gateway-127.0.0.1-$HP_DOUBLE"
    strait_ready 20 "$A_PID" "$a_admin" \
        || { log "hbone2: A is not ready: $(tail -n 5 "$a/stderr.log")"; return 1; }
}
