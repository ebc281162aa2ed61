"""jwksUri host names go through strait's own asynchronous resolver (evdns
with dns.nameservers), as ServiceEntry names do, never through a
blocking getaddrinfo() on the control thread (issue 13 item 3). The
names are under .test, which no system resolver answers: only the DNS
server the test runs on loopback knows them."""
import signal

from conftest import free_port, http_gateway, responder, wait_for
from test_dns import DNSServer
from test_gateway import get
from test_jwt import ROUTES, JwksServer, Key, bearer, claims, jwks, mint

ISS = "https://idp.test"


class SilentDNS(DNSServer):
    """A nameserver that takes every query and never answers (a dead or
    black-holed resolver); the queries it got are in .queries."""

    def answer(self, q):
        super().answer(q)
        return None


def resources(port, up_port, jwks_port, timeout="5s"):
    return http_gateway(port) + f"""apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: up, namespace: default}}
spec:
  hosts: [up.example.com]
  resolution: STATIC
  ports: [{{number: {up_port}, name: http, protocol: HTTP}}]
  endpoints: [{{address: 127.0.0.1}}]
---
""" + ROUTES + f"""---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: remote, namespace: istio-system}}
spec:
  jwtRules:
  - issuer: {ISS}
    jwksUri: http://jwks.test:{jwks_port}/jwks.json
    timeout: {timeout}
"""


def start(strait_factory, tmp_path, ns_port, text, dns_extra=""):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    (conf / "r.yaml").write_text(text)
    return strait_factory(extra=(
        f"config: {{dir: \"{conf}\"}}\n"
        f"dns: {{nameservers: [\"127.0.0.1:{ns_port}\"]{dns_extra}}}\n"
        "jwt: {jwksRefresh: 1s}\n")).start()


def test_jwks_uri_name_resolved_by_the_configured_nameserver(
        strait_factory, tmp_path, upstream_factory):
    key = Key(tmp_path / "k.pem", "EC", "k1")
    dns = DNSServer(ttl=30)
    srv = JwksServer()
    try:
        dns.records["jwks.test"] = ["127.0.0.1"]
        srv.doc = jwks(key).encode()
        up = upstream_factory(responder(lambda head: b"ok"))
        port = free_port()
        st = start(strait_factory, tmp_path, dns.port,
                   resources(port, up.port, srv.port))
        tok = mint(key, claims())
        wait_for(lambda: get(port, "/", bearer(tok))[0] == 200, 15,
                 "the JWKS fetched from jwks.test")
        assert ("jwks.test", 1) in dns.queries, dns.queries
        assert srv.gets >= 1
        assert get(port, "/", bearer(mint(key, claims(iss="https://other"))))[0] \
            == 401
        # Counted with the other DNS queries of the control thread.
        assert st.stats()["dns.queries"] >= 1
        # A name the nameserver does not know is a fetch failure that
        # names the host, and the last good keys stay.
        del dns.records["jwks.test"]
        wait_for(lambda: "cannot resolve jwks.test" in st.log(), 15,
                 "the failed resolution logged")
        assert get(port, "/", bearer(tok))[0] == 200
    finally:
        srv.stop()
        dns.stop()


def test_dead_nameserver_does_not_stall_reloads(strait_factory, tmp_path,
                                                upstream_factory):
    """The configured nameserver takes the query for jwks.test and never
    answers: while that query is outstanding (the fetch's 60 s and the
    resolver's 30 s are far off), a reload completes, the admin API
    answers and traffic flows."""
    dead = SilentDNS()
    srv = JwksServer()
    try:
        up = upstream_factory(responder(lambda head: b"ok"))
        port = free_port()
        st = start(strait_factory, tmp_path, dead.port,
                   resources(port, up.port, srv.port, timeout="60s"),
                   dns_extra=", timeout: 30s")
        wait_for(lambda: ("jwks.test", 1) in dead.queries, 15,
                 "the query for jwks.test at the configured nameserver")
        st.signal(signal.SIGHUP)
        wait_for(lambda: "reload: " in st.log() and
                 "listener(s) in effect" in st.log(), 10, "the reload")
        assert st.stats()["server.reloads_ok"] == 1
        # Traffic goes on: no token, no authorization policy: let through.
        assert get(port, "/")[0] == 200
        # The query was still unanswered all along: nothing failed yet.
        assert "cannot resolve jwks.test" not in st.log()
        assert "jwksUri http://jwks.test" not in st.log()
        assert srv.gets == 0
    finally:
        srv.stop()
        dead.stop()
