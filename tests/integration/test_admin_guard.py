"""Issue 12 item 8: the admin API against browsers. A cross-site POST
(text/plain, no preflight) cannot stop strait, a name rebound to
127.0.0.1 (DNS rebinding) is not answered, and secrets never appear in
/config_dump."""
import http.client
import json

from conftest import wait_for


def request(st, method, path, headers):
    c = http.client.HTTPConnection("127.0.0.1", st.admin_port, timeout=5)
    try:
        c.putrequest(method, path, skip_host=True)
        for k, v in headers.items():
            c.putheader(k, v)
        body = b"x" if method == "POST" else None
        if body is not None:
            c.putheader("Content-Type", "text/plain")
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def host(st):
    return f"127.0.0.1:{st.admin_port}"


def test_cross_origin_post_cannot_quit(strait_factory):
    st = strait_factory().start()
    status, body = request(st, "POST", "/quitquitquit",
                           {"Host": host(st),
                            "Origin": "https://evil.example"})
    assert status == 403, body
    assert "cross-origin" in body
    status, _ = request(st, "POST", "/reload",
                        {"Host": host(st), "Origin": "null"})
    assert status == 403
    # Still running and answering; a plain client (no Origin) may quit.
    assert st.get("/healthz/ready")[0] == 200
    assert "draining" not in st.log()
    assert request(st, "POST", "/quitquitquit", {"Host": host(st)})[0] == 200
    assert st.proc.wait(timeout=30) == 0


def test_rebound_host_is_refused(strait_factory):
    st = strait_factory().start()
    for h in ("evil.example:%d" % st.admin_port, "evil.example",
              "127.0.0.1.evil.example"):
        status, body = request(st, "GET", "/config_dump", {"Host": h})
        assert status == 403, (h, body)
        assert "admin.allowedHosts" in body
    for h in (host(st), f"localhost:{st.admin_port}", "[::1]"):
        assert request(st, "GET", "/stats", {"Host": h})[0] == 200, h
    assert "admin: refused a request for Host evil.example" in st.log()


def test_allowed_hosts_and_origins_are_honoured(strait_factory):
    st = strait_factory()
    st.write_config("", raw=(
        f"workers: 2\n"
        f"admin: {{address: 127.0.0.1:{st.admin_port}, "
        "allowedHosts: [gw-1.example.com], "
        "allowedOrigins: [\"https://console.example.com\"]}\n"))
    st.start()
    assert request(st, "GET", "/stats",
                   {"Host": f"gw-1.example.com:{st.admin_port}"})[0] == 200
    assert request(st, "GET", "/stats", {"Host": "gw-2.example.com"})[0] == 403
    assert request(st, "POST", "/reload",
                   {"Host": host(st),
                    "Origin": "https://console.example.com"})[0] == 200
    assert request(st, "POST", "/reload",
                   {"Host": host(st),
                    "Origin": "https://other.example.com"})[0] == 403


def test_join_token_is_redacted_from_config_dump(strait_factory):
    token = "sjt1." + "A" * 86
    st = strait_factory(extra=f"ca: {{join: {{token: \"{token}\"}}}}\n")
    st.start()
    code, body, _ = st.get("/config_dump")
    assert code == 200
    assert token not in body and "A" * 20 not in body
    dump = json.loads(body)
    assert dump["ca"]["join"]["token"] == "<redacted>"
