"""What selects nothing on this node, said by the running gateway as
`strait check -c` says it: logged analyze style at each load, and on
/config_dump as "applies" and "reason" for each resource."""
import json

from conftest import wait_for

RESOURCES = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-other
  namespace: default
spec:
  selector:
    matchLabels:
      app: other
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["GET"]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-admin
  namespace: default
spec:
  selector:
    matchLabels:
      app: gw
  action: DENY
  rules:
  - to:
    - operation:
        paths: ["/admin"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
spec:
  selector:
    istio: egressgateway
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: default
spec:
  hosts: [reviews]
  http:
  - route:
    - destination:
        host: reviews
"""


def reload(st):
    code, _, _ = st.get("/reload", method="POST")
    assert code == 200


def resources(st):
    dump = json.loads(st.get("/config_dump")[1])
    return {r["name"]: r for r in dump["resources"]["resources"]}


def test_running_gateway_says_what_selects_nothing_here(tmp_path, strait_factory):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "r.yaml").write_text(RESOURCES)
    node = "node: {{namespace: default, labels: {{app: {app}}}}}\n"
    extra = f"config: {{dir: \"{conf}\"}}\n"
    st = strait_factory(extra=extra + node.format(app="gw")).start()

    ist0127 = ("Warning [IST0127] (AuthorizationPolicy default/deny-other "
               f"{conf}/r.yaml:1:1) spec.selector: No matching workloads for "
               "this resource with the following labels: app=other")
    wait_for(lambda: ist0127 in st.log(), 10, "the IST0127 line")
    assert st.log().count("[IST0127]") == 1, st.log()

    res = resources(st)
    assert res["deny-other"]["applies"] is False
    assert res["deny-other"]["reason"] == (
        "IST0127 No matching workloads for this resource with the following "
        "labels: app=other")
    assert "reason" not in res["deny-admin"]
    assert res["deny-admin"]["applies"] is True
    # A Gateway whose selector the node's labels do not match is not
    # served here: said as strait check -c says it (IST0101, an Error as
    # in Istio), logged only: the load is not refused for it.
    assert res["egress"]["applies"] is False
    assert res["egress"]["reason"] == (
        'IST0101 Referenced selector not found: "istio=egressgateway"')
    assert ("Error [IST0101] (Gateway default/egress "
            f"{conf}/r.yaml:") in st.log(), st.log()
    assert res["reviews"]["applies"] is False
    assert res["reviews"]["reason"].startswith(
        "STR0001 VirtualService bound only to mesh (no gateways): ")

    # The node's labels change with the bootstrap: what applies follows,
    # and the new state is logged once.
    st.write_config("", extra + node.format(app="other"))
    reload(st)
    wait_for(lambda: resources(st)["deny-other"]["applies"] is True, 10,
             "deny-other to apply")
    res = resources(st)
    assert res["deny-admin"]["applies"] is False
    assert res["deny-admin"]["reason"].endswith("labels: app=gw")
    wait_for(lambda: "(AuthorizationPolicy default/deny-admin " in st.log(),
             10, "IST0127 for deny-admin")
    assert st.log().count("[IST0127]") == 2, st.log()
