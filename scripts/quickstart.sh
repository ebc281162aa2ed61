#!/usr/bin/env bash
# Sets up strait and runs it on a local default a newcomer can curl at
# once:
#   http://127.0.0.1:8080/   strait's TCP listener, proxying to a demo
#                            upstream on 127.0.0.1:8081
#   http://127.0.0.1:15000/  the admin API (/stats, /stats/prometheus, ...)
# The configuration lives in ./local/ (made on first run, yours to edit);
# Ctrl-C drains and stops strait and the demo upstream.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"
bash scripts/build.sh
command -v python3 >/dev/null || DEPS_FLAGS=--test bash scripts/deps.sh

home="${STRAIT_HOME:-$top/local}"
mkdir -p "$home/www"
if [ ! -f "$home/strait.yaml" ]; then
    cat >"$home/strait.yaml" <<YAML
# Made by scripts/quickstart.sh; every key is documented in
# etc/strait/strait.yaml. Edit and reload with: kill -HUP <pid>
workers: auto
admin: {address: 127.0.0.1:15000}
log: {level: info, format: text}
drainTimeout: 5s
listeners:
  - name: demo
    address: 127.0.0.1:8080
    upstreams: [127.0.0.1:8081]
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
  stop:  Ctrl-C
MSG
"$top/build/strait" run -c "$home/strait.yaml"
