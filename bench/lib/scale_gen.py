#!/usr/bin/env python3
"""The N-tenant configuration of bench/scale (issue 27), for strait, nginx
and HAProxy.

usage: scale_gen.py strait|nginx|haproxy N PORT UPSTREAM_PORT OUTDIR [--one-file]

strait: one Gateway (hosts ["*"]) on 127.0.0.1:PORT and, per tenant i, a
VirtualService (host t<i>.example.com; 3 http routes: a path prefix, a
header match, a default), a ServiceEntry (t<i>.svc.internal, 2 STATIC
endpoints, labelled version v1 and v2) and a DestinationRule (subsets v1
and v2). Written as one multi-document file per 1,000 tenants, or with
--one-file as a single file (as `kubectl get -A -o yaml` gives one file).

nginx: N server blocks (server_name t<i>.example.com), each with the same
three routes to an upstream block of 2 servers.

haproxy: one frontend with an N-entry host map (t<i>.example.com ->
backend), the path and header rules as ACLs, and N backends of 2 servers,
so each side holds N upstream groups as strait holds N clusters.

The endpoints are 127.0.0.1 (v1) and 127.0.0.2 (v2) on UPSTREAM_PORT.
"""
import os
import sys


def strait_tenant(i, up):
    return f"""apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: t{i}, namespace: tenants}}
spec:
  hosts: [t{i}.example.com]
  gateways: [default/gw]
  http:
  - match: [{{uri: {{prefix: /api/}}}}]
    route: [{{destination: {{host: t{i}.svc.internal, subset: v2, port: {{number: 80}}}}}}]
  - match: [{{headers: {{x-canary: {{exact: "1"}}}}}}]
    route: [{{destination: {{host: t{i}.svc.internal, subset: v2, port: {{number: 80}}}}}}]
  - route: [{{destination: {{host: t{i}.svc.internal, subset: v1, port: {{number: 80}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: t{i}, namespace: tenants}}
spec:
  hosts: [t{i}.svc.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints:
  - {{address: 127.0.0.1, ports: {{http: {up}}}, labels: {{version: v1}}}}
  - {{address: 127.0.0.2, ports: {{http: {up}}}, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: t{i}, namespace: tenants}}
spec:
  host: t{i}.svc.internal
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
---
"""


def strait_gateway(port):
    return f"""apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
"""


def gen_strait(n, port, up, out, one_file):
    with open(os.path.join(out, "gateway.yaml"), "w") as f:
        f.write(strait_gateway(port))
    per = n if one_file else 1000
    for start in range(0, n, per):
        with open(os.path.join(out, f"tenants-{start:06d}.yaml"), "w") as f:
            for i in range(start, min(n, start + per)):
                f.write(strait_tenant(i, up))


def gen_nginx(n, port, up, out):
    with open(os.path.join(out, "nginx.conf"), "w") as f:
        f.write(f"""worker_processes 1;
pid {out}/nginx.pid;
error_log {out}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    server_names_hash_max_size {max(512, 4 * n)};
    server_names_hash_bucket_size 64;
    variables_hash_max_size 2048;
    map $http_x_canary $canary {{ default 0; "1" 1; }}
""")
        for i in range(n):
            f.write(f"""    upstream t{i}_v1 {{ server 127.0.0.1:{up}; }}
    upstream t{i}_v2 {{ server 127.0.0.2:{up}; }}
    server {{
        listen 127.0.0.1:{port};
        server_name t{i}.example.com;
        location /api/ {{ proxy_pass http://t{i}_v2; }}
        location / {{
            if ($canary) {{ proxy_pass http://t{i}_v2; }}
            proxy_pass http://t{i}_v1;
        }}
    }}
""")
        f.write("}\n")


def gen_haproxy(n, port, up, out):
    with open(os.path.join(out, "hosts.map"), "w") as f:
        for i in range(n):
            f.write(f"t{i}.example.com t{i}\n")
    with open(os.path.join(out, "haproxy.cfg"), "w") as f:
        f.write(f"""global
    nbthread 1
    maxconn 1000
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{port}
    http-request set-var(txn.t) req.hdr(host),field(1,:),lower,map({out}/hosts.map)
    acl v2 path_beg /api/
    acl v2 req.hdr(x-canary) -m str 1
    use_backend %[var(txn.t)]_v2 if v2
    use_backend %[var(txn.t)]_v1
""")
        for i in range(n):
            f.write(f"""backend t{i}_v1
    server a 127.0.0.1:{up}
backend t{i}_v2
    server b 127.0.0.2:{up}
""")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    one_file = "--one-file" in sys.argv
    if len(args) != 5:
        sys.exit(__doc__)
    what, n, port, up, out = args[0], int(args[1]), args[2], args[3], args[4]
    os.makedirs(out, exist_ok=True)
    if what == "strait":
        gen_strait(n, port, up, out, one_file)
    elif what == "nginx":
        gen_nginx(n, port, up, out)
    elif what == "haproxy":
        gen_haproxy(n, port, up, out)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
