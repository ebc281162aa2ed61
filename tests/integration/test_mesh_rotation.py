"""Mesh certificates rotating on both ends of a connection under load.

B runs the CA and a Gateway with an ISTIO_MUTUAL server (PeerAuthentication
STRICT) in front of a plaintext upstream; A joins B's CA with a token and
routes to B's gateway through a DestinationRule ISTIO_MUTUAL. Both ask for
2 s certificates, so each side renews about every second: B rotates its
own (the gateway's server certificate) and A renews over mTLS (its client
certificate). wrk drives A until several rotations have happened on both
sides; not one request may fail.
"""
import re
import subprocess

from conftest import free_port, responder, wait_for
from test_ca import Node, nodes, token  # noqa: F401 (nodes is a fixture)

B_RESOURCES = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: mesh-in, namespace: istio-system}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: ["*"]
    tls: {{mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{name: default, namespace: istio-system}}
spec: {{mtls: {{mode: STRICT}}}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: istio-system}}
spec:
  hosts: [up.internal]
  resolution: STATIC
  ports: [{{number: {up}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [mesh-in]
  http:
  - route: [{{destination: {{host: up.internal}}}}]
"""

# maxRequestsPerConnection keeps new connections (and so new handshakes,
# with the certificates current on both sides) coming all through the run.
A_RESOURCES = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: edge, namespace: team}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: b, namespace: team}}
spec:
  hosts: [b.mesh]
  resolution: STATIC
  ports: [{{number: {b}, name: https, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: b, namespace: team}}
spec:
  host: b.mesh
  trafficPolicy:
    tls:
      mode: ISTIO_MUTUAL
      subjectAltNames: [spiffe://example.org/ns/istio-system/sa/strait]
    connectionPool: {{http: {{maxRequestsPerConnection: 20}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: team}}
spec:
  hosts: ["*"]
  gateways: [edge]
  http:
  - route: [{{destination: {{host: b.mesh}}}}]
"""

B_ID = "spiffe://example.org/ns/istio-system/sa/strait"
A_ID = "spiffe://example.org/ns/team/sa/caller"


def serials(log, spiffe_id):
    """The serial numbers of the certificates the log says this node took
    for spiffe_id (issued, rotated, renewed), in order."""
    return re.findall(r"CA: certificate for " + re.escape(spiffe_id)
                      + r" [A-Za-z ]+ \(serial ([0-9a-f]+),", log)


def wrk(port, seconds):
    """One wrk run against port; returns (requests, output). Any socket
    error or non-2xx answer fails the test."""
    p = subprocess.run(["wrk", "-t", "1", "-c", "8", "-d", f"{seconds}s",
                        f"http://127.0.0.1:{port}/"],
                       capture_output=True, text=True, timeout=60)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "Socket errors" not in out, out
    assert "Non-2xx" not in out, out
    return int(out.split(" requests in ")[0].split()[-1]), out


def test_both_sides_rotate_under_load_without_a_failed_request(
        nodes, tmp_path, upstream_factory):
    up = upstream_factory(responder(lambda head: b"ok"))
    b_port, a_port, ca_port = free_port(), free_port(), free_port()

    b_conf = tmp_path / "b-conf"
    b_conf.mkdir()
    (b_conf / "r.yaml").write_text(B_RESOURCES.format(port=b_port,
                                                      up=up.port))
    b = nodes("b", f"{{enabled: true, dir: {tmp_path / 'b-ca'}, "
                   f"address: 127.0.0.1:{ca_port}, certTTL: 2s}}",
              node_yaml=f"config: {{dir: \"{b_conf}\"}}\n").start()
    b.ca_url = f"https://127.0.0.1:{ca_port}"

    a_conf = tmp_path / "a-conf"
    a_conf.mkdir()
    (a_conf / "r.yaml").write_text(A_RESOURCES.format(port=a_port, b=b_port))
    a = nodes("a", f"{{dir: {tmp_path / 'a-ca'}, certTTL: 2s}}",
              node_yaml=("node: {namespace: team, serviceAccount: caller}\n"
                         f"config: {{dir: \"{a_conf}\"}}\n"),
              args=["--join", b.ca_url, "--token",
                    token(b, ns="team", sa="caller")]).start()

    # One request end to end before the load: the path works.
    wait_for(lambda: subprocess.run(
        ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{a_port}/"],
        capture_output=True).stdout == b"ok", 15, "a request through A and B")

    b0 = len(serials(b.log(), B_ID))
    a0 = len(serials(a.log(), A_ID))
    runs = []

    def rotated_enough():
        # Load in short runs until five new certificates on each side have
        # been taken.
        runs.append(wrk(a_port, 2))
        return (len(serials(b.log(), B_ID)) - b0 >= 5 and
                len(serials(a.log(), A_ID)) - a0 >= 5)

    wait_for(rotated_enough, 120, "five rotations on both sides under load",
             interval=0)
    assert sum(n for n, _ in runs) > 0
    log_a, log_b = a.log(), b.log()
    # Every serial is new: each rotation really is a new certificate...
    for s in (serials(log_b, B_ID), serials(log_a, A_ID)):
        assert len(set(s)) == len(s), s
    assert "renewed over mTLS" in log_a
    # ...and B's gateway took each of its own from memory, handshake by
    # handshake: its listener never reloads anything for a rotation.
    assert f"listener gateway-127.0.0.1-{b_port}: certificates reloaded" \
        not in log_b
    for text in (log_a, log_b):
        assert "renewal failed" not in text
        assert "certificate refused" not in text
        assert "flags=UF" not in text and "flags=UC" not in text
    # A's requests reached B over mTLS as A's identity.
    assert f"peer_uri_san={A_ID}" in log_b
