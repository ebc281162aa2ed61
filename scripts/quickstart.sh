#!/usr/bin/env bash
# Sets up strait and runs it on a local default a newcomer can curl at
# once:
#   http://127.0.0.1:8080/   a Gateway with a VirtualService routing to a
#                            demo upstream on 127.0.0.1:8081
#   http://127.0.0.1:15000/  the admin API (/stats, /config_dump, ...)
#   127.0.0.1:15012          the embedded CA (SPIFFE certificates; join
#                            tokens with: build/strait ca token create ...)
# The configuration lives in ./local/ (made on first run, yours to edit):
# strait.yaml, Istio resources in conf.d/ (hot reloaded), the CA in ca/.
# Ctrl-C drains and stops strait and the demo upstream.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
bash scripts/build.sh
command -v python3 >/dev/null || DEPS_FLAGS=--test bash scripts/deps.sh

home="${STRAIT_HOME:-$top/local}"
mkdir -p "$home/www" "$home/conf.d"
if [ ! -f "$home/strait.yaml" ]; then
    cat >"$home/strait.yaml" <<YAML
# Made by scripts/quickstart.sh; every key is documented in
# etc/strait/strait.yaml. Edit and reload with: kill -HUP <pid>
workers: auto
admin: {address: 127.0.0.1:15000}
log: {level: info, format: text}
drainTimeout: 5s
config: {dir: "$home/conf.d"}
ca: {enabled: true, dir: "$home/ca", address: "127.0.0.1:15012"}
YAML
fi
if [ ! -f "$home/conf.d/demo.yaml" ]; then
    cat >"$home/conf.d/demo.yaml" <<YAML
# Istio resources, reloaded when a file here changes (strait check $home/conf.d)
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: demo, namespace: default}
spec:
  selector: {}
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: demo-upstream, namespace: default}
spec:
  hosts: [demo.local]
  resolution: STATIC
  ports: [{number: 8081, name: http, protocol: HTTP}]
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: demo, namespace: default}
spec:
  hosts: ["*"]
  gateways: [demo]
  http:
  - route: [{destination: {host: demo.local}}]
YAML
fi
[ -f "$home/www/index.html" ] || echo "hello from behind strait" >"$home/www/index.html"

python3 -m http.server --bind 127.0.0.1 --directory "$home/www" 8081 \
    >"$home/upstream.log" 2>&1 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null; wait "$upstream" 2>/dev/null || true' EXIT

cat <<MSG
strait is starting with $home/strait.yaml
  try:   curl http://127.0.0.1:8080/
         curl http://127.0.0.1:15000/stats
         curl http://127.0.0.1:15000/config_dump
         $top/build/strait ca show -c $home/strait.yaml
  stop:  Ctrl-C
MSG
"$top/build/strait" run -c "$home/strait.yaml"
