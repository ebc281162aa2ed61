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
# port is only used for the direct rows). Sets UP_PID.
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

# strait_ready SECONDS: waits, through the admin API, until strait says
# it is ready (GET /healthz/ready is 200 with no failed resource load) and
# every listener of STRAIT_LISTENERS is in /stats. Listeners are bound
# before the admin API answers its first request, so this is the moment
# the ports accept. Polls every 50 ms; fails when strait exits or after
# SECONDS.
strait_ready() {
    local limit=$1 i ready stats name missing
    for ((i = 0; i < limit * 20; i++)); do
        kill -0 "$PROXY_PID" 2>/dev/null || return 1
        ready=$(curl -s -m 1 -w '%{http_code}' "http://127.0.0.1:$P_ADMIN/healthz/ready" || true)
        if [ "${ready: -3}" = 200 ] && ! grep -q 'failed' <<<"$ready"; then
            stats=$(curl -s -m 1 "http://127.0.0.1:$P_ADMIN/stats" || true)
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
    start_bg "$d/stderr.log" haproxy -db -f "$d/haproxy.cfg"
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
master_process on;
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
    start_bg "$d/stderr.log" nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf"
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
