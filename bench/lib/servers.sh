# shellcheck shell=bash
# Configurations and start/stop of the upstream and the three proxies.
# Needs common.sh. Globals in: WORK (scratch dir), STRAIT_BIN, UP_WORKERS,
# IDLE_MAX (largest idle connection count, sizes connection limits).
# Each proxy gets the same shape: a plaintext HTTP port (P_PLAIN), a TLS
# port with ALPN h2,http/1.1 and TLS 1.2-1.3 (P_TLS), a TCP relay port
# (P_TCP), N workers, keep-alive to the upstream, no access log.

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

# strait_start WORKERS: writes $WORK/strait/strait.yaml and runs strait.
strait_start() {
    local w=$1 d=$WORK/strait
    mkdir -p "$d"
    proxy_ports
    cat >"$d/strait.yaml" <<CONF
workers: $w
admin:
  address: 127.0.0.1:$P_ADMIN
log:
  level: warn
  accessLog: false
drainTimeout: 1s
listeners:
  - name: plain
    address: 127.0.0.1:$P_PLAIN
    protocol: http
    routes: [{host: "*", pathPrefix: /, cluster: up}]
  - name: tls
    address: 127.0.0.1:$P_TLS
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
    address: 127.0.0.1:$P_TCP
    protocol: tcp
    upstreams: [127.0.0.1:$UP_PLAIN]
    backlog: 4096
clusters:
  - name: up
    endpoints: [127.0.0.1:$UP_PLAIN]
    protocol: http1
CONF
    "$STRAIT_BIN" check -c "$d/strait.yaml" >"$d/check.log" 2>&1 \
        || die "strait check refused the config: $(cat "$d/check.log")"
    start_bg "$d/stderr.log" "$STRAIT_BIN" run -c "$d/strait.yaml"
    PROXY_PID=$LAST_PID
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
        strait) strait_start "$w" ;;
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
