"""AuthorizationPolicy at the gateway: DENY before ALLOW, allow-only-what-
matches once an ALLOW policy exists, 403 with RBAC_ACCESS_DENIED and the
deciding policy in the access log, checked before routing, and policies
hot reloaded like every other resource."""
import os

from conftest import responder, wait_for
from test_gateway import get, request, start_with_up
from test_grpc import grpc_backend, grpc_gateway  # noqa: F401 (a fixture)

ROUTES = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{destination: {host: up.example.com}}]
"""

POLICIES = """---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: istio-system}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin", "/admin/{**}"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-reads, namespace: istio-system}
spec:
  rules:
  - from: [{source: {ipBlocks: [127.0.0.0/8]}}]
    to: [{operation: {methods: [GET, HEAD], notPaths: ["/private*"]}}]
  - to: [{operation: {paths: ["/private*"]}}]
    when: [{key: "request.headers[x-token]", values: [letmein]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: elsewhere, namespace: shop}
spec:
  action: DENY
  rules: [{}]
"""


SEEN = []


def seen(head):
    SEEN.append(head.split(b" ")[1].decode())
    return b"ok"


ok_handler = responder(seen)


def test_authorization_policies(strait_factory, tmp_path, upstream_factory):
    up = upstream_factory(ok_handler)
    st, port = start_with_up(strait_factory, tmp_path, up.port,
                             ROUTES + POLICIES)
    assert get(port, "/x")[0] == 200
    # DENY first, even for what an ALLOW policy allows.
    status, _, body = get(port, "/admin/users")
    assert (status, body) == (403, b"RBAC: access denied")
    # With an ALLOW policy, what none of its rules matches is denied.
    assert request(port, "POST", "/x", {"content-length": "0"})[0] == 403
    assert get(port, "/private/doc")[0] == 403
    assert get(port, "/private/doc", {"x-token": "letmein"})[0] == 200
    # Checked before routing: a denied request never reaches the router.
    wait_for(lambda: "RBAC_ACCESS_DENIED[istio-system/deny-admin]" in st.log(),
             10, "the DENY policy in the access log")
    assert "RBAC_ACCESS_DENIED[none]" in st.log()
    assert sorted(SEEN) == ["/private/doc", "/x"]
    s = st.stats()
    denied = [v for k, v in s.items() if k.endswith(".http.rbac_denied")]
    assert sum(denied) == 3
    assert "strait_http_rbac_denied_total" in st.get("/stats/prometheus")[1]

    # Policies reload with the other resources: without the DENY policy
    # /admin is a plain read.
    conf = tmp_path / "conf.d"
    text = (conf / "r.yaml").read_text()
    start = text.index("---\napiVersion: security.istio.io/v1\nkind: "
                       "AuthorizationPolicy\nmetadata: {name: deny-admin")
    end = text.index("---", start + 3)
    tmp = conf / ".r.tmp"
    tmp.write_text(text[:start] + text[end:])
    os.replace(tmp, conf / "r.yaml")
    wait_for(lambda: get(port, "/admin/users")[0] == 200, 15,
             "the DENY policy gone")
    assert request(port, "POST", "/x", {"content-length": "0"})[0] == 403


def test_grpc_denied_is_permission_denied(strait_factory, tmp_path,
                                         grpc_backend):
    """A gRPC call an AuthorizationPolicy denies ends with grpc-status 7
    (PERMISSION_DENIED), as Envoy maps its 403; other calls go through."""
    import grpc

    _, port = grpc_gateway(strait_factory, tmp_path, grpc_backend, extra="""---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-unary, namespace: istio-system}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/t.S/Unary]}}]}]
""")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert list(ch.unary_stream("/t.S/ServerStream")(b"3", timeout=10))
        try:
            ch.unary_unary("/t.S/Unary")(b"x", timeout=10)
            raise AssertionError("a denied call went through")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e


def test_policy_without_spec_allows_nothing(strait_factory, tmp_path,
                                           upstream_factory):
    """Istio's allow-nothing policy, as its docs write it: no spec at all.
    It loads, and denies every request, as `spec: {}` does."""
    up = upstream_factory(ok_handler)
    st, port = start_with_up(strait_factory, tmp_path, up.port, ROUTES + """---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: allow-nothing
  namespace: istio-system
""")
    assert get(port, "/x")[0] == 403
    assert "RBAC_ACCESS_DENIED[none]" in st.log() or wait_for(
        lambda: "RBAC_ACCESS_DENIED[none]" in st.log(), 10, "the denial logged")
