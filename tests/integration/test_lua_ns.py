"""LuaPolicies isolated by namespace, on the real binary: two namespaces'
Gateways share one port; the tenant's policy (no targetRefs) runs only on
its own Gateway's requests, never sees the other's Authorization header,
runs in a Lua state of its own, cannot replace strait.http.request
for the shop's authorization policy, and its shared dict of the same
name as the shop's is another store. A targetRef to another namespace's
Gateway is refused (STR0010 in `strait check`, the policy left out and
the rest served) until a ReferenceGrant there allows it."""
import json
import subprocess

from conftest import STRAIT, free_port, read_head, responder, wait_for
from test_gateway import get
from test_lua import head_echo, lua_states

RESOURCES = """apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: shop}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["shop.example.com"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw, namespace: tenant}}
spec:
  selector: {{}}
  servers:
  - port: {{number: {port}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: ["tenant.example.com"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up_port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: auth, namespace: default}}
spec:
  hosts: [auth.example.com]
  resolution: STATIC
  ports: [{{number: {auth_port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: shop}}
spec:
  hosts: ["shop.example.com"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: tenant}}
spec:
  hosts: ["tenant.example.com"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: up.example.com}}}}]
---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {{name: authz, namespace: shop}}
spec:
  targetRefs: [{{kind: Gateway, name: gw}}]
  sharedDicts: [{{name: limits}}]
  source:
    inline: |
      function on_request(h)
        strait.shared.limits:set("secret", "shop-secret")
        local st = strait.http.request{{
          upstream = "auth.example.com:{auth_port}",
          headers = {{authorization =
                     h:headers():get("authorization") or ""}}}}
        if st ~= 200 then h:respond(403, {{}}, "denied\\n") end
      end
---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {{name: spy, namespace: tenant}}
spec:
  priority: 100
  sharedDicts: [{{name: limits}}]
  source:
    inline: |
      local shared = strait.shared
      local allow = function() return 200, {{}}, "" end
      local ok = pcall(function() strait.http.request = allow end)
      pcall(function() _G.strait = {{http = {{request = allow}}}} end)
      pcall(function() getmetatable(_ENV).__index.strait =
                       {{http = {{request = allow}}}} end)
      function on_request(h)
        local hd = h:headers()
        hd:set("x-tenant-saw", hd:get("authorization") or "none")
        hd:set("x-tenant-replace", ok and "replaced" or "refused")
        hd:set("x-tenant-dict",
               tostring(shared.limits:get("secret")))
      end
"""


def auth_handler(c):
    """The authorization service: 200 only for "Bearer good", else 403
    (keep-alive HTTP/1.1; bodies are not read)."""
    buf = b""
    while True:
        buf = read_head(c, buf)
        if buf is None:
            return
        head, _, buf = buf.partition(b"\r\n\r\n")
        ok = b"\r\nauthorization: bearer good" in head.lower()
        c.sendall(b"HTTP/1.1 %d X\r\ncontent-length: 0\r\n\r\n"
                  % (200 if ok else 403))


def start_two(strait_factory, tmp_path, upstream_factory, extra=""):
    """strait (one worker) with RESOURCES and extra: returns it, the
    Gateways' port and the upstream."""
    up = upstream_factory(responder(head_echo))
    auth = upstream_factory(auth_handler)
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(
        RESOURCES.format(port=port, up_port=up.port, auth_port=auth.port)
        + extra)
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n",
                        workers=1).start()
    return st, port, up


def shop(port, token):
    return get(port, "/a", {"host": "shop.example.com",
                            "authorization": f"Bearer {token}"})


def tenant(port):
    return get(port, "/t", {"host": "tenant.example.com",
                            "authorization": "Bearer tenant-own"})


def test_tenant_policy_isolated_from_other_namespace(
        strait_factory, tmp_path, upstream_factory):
    st, port, _ = start_two(strait_factory, tmp_path, upstream_factory)
    # The shop's authorization still refuses a bad token: the tenant's
    # policy could not replace strait.http.request for it.
    status, _, body = shop(port, "bad")
    assert (status, body) == (403, b"denied\n")
    # A good token passes, and the tenant's policy never ran on the
    # shop's request: the upstream sees none of its headers.
    status, _, body = shop(port, "good")
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert "x-tenant-saw" not in seen and "x-tenant-replace" not in seen
    # On its own Gateway's requests it runs, and its assignment to
    # strait.http.request was refused.
    status, _, body = tenant(port)
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert seen["x-tenant-saw"] == ["Bearer tenant-own"]
    assert seen["x-tenant-replace"] == ["refused"]
    # Its dict of the same name is another store than the shop's.
    assert seen["x-tenant-dict"] == ["nil"]
    # One state per namespace on the worker: the tenant's and the shop's.
    assert lua_states(st) == 2


GRANTED_SPY = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: steal, namespace: tenant}
spec:
  targetRefs: [{kind: Gateway, name: gw, namespace: shop}]
  source:
    inline: |
      function on_request(h)
        h:headers():set("x-steal", h:headers():get("authorization") or "-")
      end
"""

GRANT = """---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: lua-from-tenant, namespace: shop}
spec:
  from: [{group: strait.io, kind: LuaPolicy, namespace: tenant}]
  to: [{group: networking.istio.io, kind: Gateway, name: gw}]
"""


def test_cross_namespace_target_needs_grant(strait_factory, tmp_path,
                                            upstream_factory):
    """Without a ReferenceGrant in the shop's namespace, the tenant's
    policy that targets the shop's Gateway is not loaded (the rest is
    served); `strait check` names it (STR0010) and fails. A grant added
    later applies on the reload it causes."""
    st, port, _ = start_two(strait_factory, tmp_path, upstream_factory,
                        GRANTED_SPY)
    status, _, body = shop(port, "good")
    assert status == 200, body
    assert "x-steal" not in json.loads(body)["headers"]
    r = subprocess.run([STRAIT, "check", str(tmp_path / "conf.d")],
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "STR0010" in out and "LuaPolicy tenant/steal" in out, out
    assert "no ReferenceGrant in 'shop'" in out, out
    wait_for(lambda: "STR0010" in st.log(), 10, "the gateway logs why")
    # The shop's owner adds the grant: the reload loads the policy.
    (tmp_path / "conf.d" / "grant.yaml").write_text(GRANT)

    def stolen():
        status, _, body = shop(port, "good")
        return status == 200 and \
            json.loads(body)["headers"].get("x-steal") == ["Bearer good"]
    wait_for(stolen, 20, "the granted policy applied after the reload")


def test_cross_namespace_target_with_grant(strait_factory, tmp_path,
                                           upstream_factory):
    """With the shop's ReferenceGrant, the tenant's policy runs on the
    shop's Gateway; `strait check` passes."""
    st, port, _ = start_two(strait_factory, tmp_path, upstream_factory,
                        GRANTED_SPY + GRANT)
    status, _, body = shop(port, "good")
    assert status == 200, body
    assert json.loads(body)["headers"]["x-steal"] == ["Bearer good"]
    r = subprocess.run([STRAIT, "check", str(tmp_path / "conf.d")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


ROOT_POLICY = """---
apiVersion: strait.io/v1alpha1
kind: LuaPolicy
metadata: {name: mesh-wide, namespace: istio-system}
spec:
  source:
    inline: |
      function on_request(h) h:headers():set("x-root", "1") end
"""


def test_root_namespace_policy_applies_to_every_gateway(
        strait_factory, tmp_path, upstream_factory):
    """A policy without targetRefs in the root namespace runs on every
    Gateway's requests, as a root-namespace Istio policy is mesh-wide;
    the tenant's, beside it, still only on its own."""
    st, port, _ = start_two(strait_factory, tmp_path, upstream_factory,
                            ROOT_POLICY)
    status, _, body = shop(port, "good")
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert seen["x-root"] == ["1"] and "x-tenant-saw" not in seen
    status, _, body = tenant(port)
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert seen["x-root"] == ["1"] and "x-tenant-saw" in seen
    # Three namespaces' policies on the listener: three states.
    assert lua_states(st) == 3
