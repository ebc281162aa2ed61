"""Signals, drain, reload and the admin API of a running strait."""
import signal
import socket
import time

from prometheus_client.parser import text_string_to_metric_families

from conftest import connect, free_port, recv_exact, wait_for


def lst(name, port, up, extra=""):
    return (f"  - name: {name}\n    address: \"127.0.0.1:{port}\"\n"
            f"    upstreams: [\"{up}\"]\n{extra}")


def echo_ok(c, msg=b"ping"):
    c.sendall(msg)
    return recv_exact(c, len(msg)) == msg


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def test_admin_endpoints(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("adm", port, up.addr)).start()
    code, body, _ = st.get("/healthz/ready")
    assert code == 200 and "LIVE" in body
    code, body, hdr = st.get("/config_dump")
    assert code == 200 and hdr["Content-Type"] == "application/json"
    import json
    dump = json.loads(body)
    assert dump["workers"] == 2
    assert dump["listeners"][0]["name"] == "adm"
    assert dump["listeners"][0]["upstreams"] == [up.addr]
    assert dump["drainTimeout"] == "30s"
    assert st.get("/nope")[0] == 404
    assert st.get("/quitquitquit")[0] == 405  # GET is not allowed
    assert st.get("/stats", method="POST")[0] == 405


def test_prometheus_exposition_parses(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("prom", port, up.addr)).start()
    with connect(port) as c:
        assert echo_ok(c, b"x" * 100)
        code, body, hdr = st.get("/stats/prometheus")
    assert code == 200
    assert hdr["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    # prometheus_client strips _total from counter family names.
    for name in ("strait_listener_connections_accepted",
                 "strait_listener_connections_closed",
                 "strait_listener_received_bytes", "strait_listener_sent_bytes",
                 "strait_upstream_connect_failures",
                 "strait_upstream_connect_timeouts",
                 "strait_worker_connections_accepted"):
        assert fams[name].type == "counter", name
    assert fams["strait_listener_connections_active"].type == "gauge"

    def sample(fam, **labels):
        for s in fams[fam].samples:
            if all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        raise KeyError(fam)

    assert sample("strait_listener_connections_accepted", listener="prom") == 1
    assert sample("strait_listener_connections_active", listener="prom") == 1
    assert sample("strait_listener_received_bytes", listener="prom") == 100
    per_worker = [s.value for s in fams["strait_worker_connections_accepted"].samples]
    assert len(per_worker) == 2 and sum(per_worker) == 1


def test_drain_finishes_inflight_refuses_new_and_exits_zero(
        strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("dr", port, up.addr), extra="drainTimeout: 60s\n").start()
    c = connect(port)
    assert echo_ok(c)
    t0 = time.monotonic()
    st.signal(signal.SIGTERM)
    wait_for(lambda: st.get("/healthz/ready")[0] == 503, 10, "not ready")
    wait_for(lambda: refused(port), 10, "new connections refused")
    # The connection that was open goes on working.
    assert echo_ok(c, b"still here")
    assert st.proc.poll() is None
    c.close()
    assert st.proc.wait(timeout=30) == 0
    # It exited because the last connection ended, well before 60 s.
    assert time.monotonic() - t0 < 30
    assert "drained; exiting" in st.log()


def test_drain_deadline_closes_leftovers_and_exits_zero(
        strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("dl", port, up.addr), extra="drainTimeout: 500ms\n").start()
    c = connect(port)
    assert echo_ok(c)
    st.signal(signal.SIGINT)
    assert st.proc.wait(timeout=30) == 0
    c.settimeout(10)
    assert c.recv(10) == b""
    c.close()
    assert "drain deadline reached" in st.log()
    assert "end=shutdown" in st.log()


def test_quitquitquit_drains_and_exits(strait_factory):
    st = strait_factory().start()
    code, body, _ = st.get("/quitquitquit", method="POST")
    assert code == 200
    assert st.proc.wait(timeout=30) == 0


def test_sighup_adds_removes_changes_listeners_keeping_unchanged_sessions(
        strait_factory, upstream_factory):
    up1 = upstream_factory()
    up2 = upstream_factory()
    pk, pr, pc, pn = (free_port() for _ in range(4))
    keep = lst("keep", pk, up1.addr)
    st = strait_factory(keep + lst("gone", pr, up1.addr) + lst("chg", pc, up1.addr)).start()
    ck = connect(pk)
    cc = connect(pc)
    assert echo_ok(ck) and echo_ok(cc)
    # keep unchanged, gone removed, chg points at up2, new added.
    st.write_config(keep + lst("chg", pc, up2.addr) + lst("new", pn, up2.addr))
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 1, 10, "reload")
    # Sessions on the unchanged and on the changed listener go on.
    assert echo_ok(ck, b"kept") and echo_ok(cc, b"changed but mine")
    wait_for(lambda: refused(pr), 10, "removed listener closed")
    with connect(pn) as c:
        assert echo_ok(c)
    before = up2.conns
    with connect(pc) as c:
        assert echo_ok(c)
    assert up2.conns == before + 1, "changed listener uses its new upstream"
    # Counters follow the listener's name across the change.
    assert st.stats()["listener.keep.downstream_cx_total"] == 1
    assert st.stats()["listener.chg.downstream_cx_total"] == 2
    assert "listener.gone.downstream_cx_total" not in st.stats()
    ck.close()
    cc.close()


def test_sighup_with_bad_file_keeps_running_config(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    good = lst("g", port, up.addr)
    st = strait_factory(good).start()
    st.write_config(good + "  - name: broken\n    address: nowhere\n")
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_failed"] == 1, 10, "failed reload")
    assert "reload failed, keeping the running configuration" in st.log()
    assert "bad address 'nowhere'" in st.log()
    code, body, _ = st.get("/healthz/ready")
    assert code == 200 and "last reload failed" in body
    assert "last_reload_error" in st.get("/stats")[1]
    with connect(port) as c:
        assert echo_ok(c)
    # A port conflict is a bad reload too and changes nothing.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    try:
        hp = held.getsockname()[1]
        st.write_config(good + lst("clash", hp, up.addr))
        st.signal(signal.SIGHUP)
        wait_for(lambda: st.stats()["server.reloads_failed"] == 2, 10, "failed reload")
        assert "Address already in use" in st.log()
    finally:
        held.close()
    with connect(port) as c:
        assert echo_ok(c)
    # A good file afterwards clears the error.
    st.write_config(good)
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 1, 10, "reload")
    assert "last reload failed" not in st.get("/healthz/ready")[1]


def test_sighup_applies_log_level_and_format(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("lv", port, up.addr)).start()
    with connect(port) as c:
        assert echo_ok(c)
    wait_for(lambda: st.log().count("tcp_session") == 1, 10, "access log")
    # warn hides the info-level access log.
    st.write_config(lst("lv", port, up.addr), extra="log: {level: warn}\n")
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 1, 10, "reload")
    with connect(port) as c:
        assert echo_ok(c)
    wait_for(lambda: st.stats()["listener.lv.downstream_cx_destroy"] == 2, 10, "close")
    assert st.log().count("tcp_session") == 1
    # json switches the format of the next lines.
    st.write_config(lst("lv", port, up.addr), extra="log: {format: json}\n")
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 2, 10, "reload")
    with connect(port) as c:
        assert echo_ok(c)
    import json
    line = wait_for(lambda: [l for l in st.log().splitlines()
                             if l.startswith("{") and "tcp_session" in l], 10, "json line")[0]
    assert json.loads(line)["listener"] == "lv"


def test_sighup_turns_access_log_off(strait_factory, upstream_factory):
    up = upstream_factory()
    port = free_port()
    st = strait_factory(lst("al", port, up.addr)).start()
    st.write_config(lst("al", port, up.addr), extra="log: {accessLog: false}\n")
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_ok"] == 1, 10, "reload")
    with connect(port) as c:
        assert echo_ok(c)
    wait_for(lambda: st.stats()["listener.al.downstream_cx_destroy"] == 1, 10, "close")
    assert "tcp_session" not in st.log()
