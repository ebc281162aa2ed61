"""Churn soak: 1,000 WorkloadEntries relabelled in each of 100 snapshots
(100,000 relabels) while traffic follows the labels. Every index from a
key to its dependants (clusters by fingerprint, per-worker pools, route
views) must drop what the old labels built, so memory returns to where it
was after warm-up."""
import os

from conftest import free_port, read_head, responder, rss_kib, http_gateway, wait_for

N_WES = 1000
ROUNDS = 100
WARMUP = 10


def resources(gw_port, ports, rnd):
    head = f"""{http_gateway(gw_port)}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: svc, namespace: default}}
spec:
  hosts: [svc.example.com]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  workloadSelector: {{labels: {{app: svc}}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: svc, namespace: default}}
spec:
  host: svc.example.com
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: svc, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - match: [{{headers: {{x-v: {{exact: v1}}}}}}]
    route: [{{destination: {{host: svc.example.com, subset: v1}}}}]
  - route: [{{destination: {{host: svc.example.com, subset: v2}}}}]
"""
    wes = []
    for i in range(N_WES):
        version = "v1" if (i + rnd) % 2 == 0 else "v2"
        wes.append(f"""---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {{name: we-{i}, namespace: default}}
spec:
  address: 127.0.0.1
  ports: {{http: {ports[i % 2]}}}
  labels: {{app: svc, version: {version}, shard: s{i % 7}}}
""")
    return head + "".join(wes)


def named(name):
    return responder(lambda head: name.encode())


def ask(port):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nhost: svc\r\nx-v: v1\r\n\r\n")
        buf = read_head(s)
        assert buf is not None
        head, _, rest = buf.partition(b"\r\n\r\n")
        while len(rest) < 2:
            d = s.recv(100)
            if not d:
                break
            rest += d
        return head.split(b" ")[1], rest


def test_relabel_soak_memory_returns_to_baseline(strait_factory, tmp_path,
                                                 upstream_factory):
    ups = [upstream_factory(named("ev")), upstream_factory(named("od"))]
    ports = [u.port for u in ups]
    conf = tmp_path / "conf.d"
    conf.mkdir()
    gw = free_port()
    (conf / "r.yaml").write_text(resources(gw, ports, 0))
    st = strait_factory(workers=1,
                        extra=f"config: {{dir: \"{conf}\", debounce: 10ms}}\n")
    # An address sanitizer build keeps freed memory in quarantine; keep it
    # small so the resident size shows what is still referenced.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                           ":quarantine_size_mb=1").lstrip(":")
    st.start(env=env)
    base = None
    for rnd in range(ROUNDS + 1):
        if rnd > 0:
            tmp = conf / ".r.tmp"
            tmp.write_text(resources(gw, ports, rnd))
            os.replace(tmp, conf / "r.yaml")
        # Subset v1 is the even entries in even rounds, the odd ones in odd
        # rounds: the answer shows this round's labels are the ones routed.
        want = (b"200", b"ev" if rnd % 2 == 0 else b"od")
        wait_for(lambda: ask(gw) == want, 30, f"round {rnd}'s labels")
        if rnd == WARMUP:
            base = rss_kib(st.proc.pid)
    grown = rss_kib(st.proc.pid) - base
    print(f"RSS after warm-up {base} KiB, grown {grown} KiB")
    assert st.stats()["resources.reloads_ok"] >= ROUNDS + 1
    # 90 more snapshots of 1,000 relabelled entries: anything kept per
    # relabel would be tens of MiB by now.
    assert grown < 8 * 1024, f"RSS grew {grown} KiB over {ROUNDS - WARMUP} rounds"
