"""Access logs in Envoy's format strings (log.accessLogEncoding TEXT and
JSON): every operator against a real request made with curl, Istio's
default JSON keys parsed back, a file reopened on SIGUSR1 after a
logrotate-style rename, a writer that cannot keep up (lines dropped and
counted, requests unaffected), and a bad format refused by strait check."""
import json
import os
import re
import signal
import socket
import subprocess

from conftest import STRAIT, free_port, wait_for
from httpd import HttpUpstream

import pytest

ISTIO_JSON_KEYS = [
    "start_time", "route_name", "method", "path", "protocol",
    "response_code", "response_flags", "response_code_details",
    "connection_termination_details", "bytes_received", "bytes_sent",
    "duration", "upstream_service_time", "x_forwarded_for", "user_agent",
    "request_id", "authority", "upstream_host", "upstream_cluster",
    "upstream_local_address", "downstream_local_address",
    "downstream_remote_address", "requested_server_name",
    "upstream_transport_failure_reason",
]


@pytest.fixture
def up():
    u = HttpUpstream()
    yield u
    u.stop()


def start(strait_factory, up_port, log_yaml, dead_port=None):
    port = free_port()
    routes = "      - {host: \"*\", pathPrefix: /, cluster: e}\n"
    clusters = f"  - {{name: e, endpoints: [\"127.0.0.1:{up_port}\"]}}\n"
    if dead_port is not None:
        routes = ("      - {host: \"*\", pathPrefix: /dead, cluster: d}\n"
                  + routes)
        clusters += f"  - {{name: d, endpoints: [\"127.0.0.1:{dead_port}\"]}}\n"
    yaml = (f"  - name: f\n    address: \"127.0.0.1:{port}\"\n"
            f"    protocol: http\n    routes:\n{routes}")
    extra = f"log: {log_yaml}\nclusters:\n{clusters}"
    return strait_factory(yaml, extra=extra, workers=1).start(), port


def curl(port, path="/x?q=1", *args):
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
         "-H", "User-Agent: curl-test", "-H", "X-Request-Id: rid-1",
         *args, f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, timeout=20)
    return int(out.stdout)


def lines_with(text, needle):
    return [ln for ln in text.splitlines() if needle in ln]


def test_istio_text_default(strait_factory, up):
    st, port = start(strait_factory, up.port, "{accessLogEncoding: TEXT}")
    assert curl(port) == 200
    wait_for(lambda: lines_with(st.log(), '"curl-test"'), 10,
             "the access log line")
    line = lines_with(st.log(), '"curl-test"')[0]
    m = re.fullmatch(
        r'\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\] "GET /x\?q=1 HTTP/1.1" '
        r'200 - via_upstream - "-" 0 (\d+) (\d+) - "127.0.0.1" "curl-test" '
        r'"rid-1" "127.0.0.1:(\d+)" "127.0.0.1:(\d+)" e '
        r'127.0.0.1:(\d+) 127.0.0.1:(\d+) 127.0.0.1:(\d+) - -', line)
    assert m, line
    assert int(m.group(2)) > 0                 # bytes sent
    assert int(m.group(4)) == port             # authority
    assert int(m.group(5)) == up.port          # upstream host
    assert int(m.group(7)) == port             # downstream local
    assert st.stats()["access_log.written"] >= 1


def test_every_operator(strait_factory, up):
    ops = [
        "%START_TIME(%s)%", "%REQ(:METHOD)%", "%REQ(:PATH)%",
        "%REQ_WITHOUT_QUERY(:PATH)%", "%REQ(X-MISSING?USER-AGENT)%",
        "%REQ(USER-AGENT):4%", "%RESP(CONTENT-TYPE)%", "%RESPONSE_CODE%",
        "%RESPONSE_FLAGS%", "%RESPONSE_CODE_DETAILS%",
        "%UPSTREAM_HOST%", "%UPSTREAM_CLUSTER%", "%DURATION%",
        "%BYTES_RECEIVED%", "%BYTES_SENT%", "%DOWNSTREAM_REMOTE_ADDRESS%",
        "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
        "%DOWNSTREAM_LOCAL_ADDRESS%", "%UPSTREAM_LOCAL_ADDRESS%",
        "%REQUESTED_SERVER_NAME%", "%ROUTE_NAME%",
        "%UPSTREAM_TRANSPORT_FAILURE_REASON%", "%PROTOCOL%",
        "%UPSTREAM_REQUEST_ATTEMPT_COUNT%", "%REQ(:AUTHORITY)%",
        "%HOSTNAME%", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%",
        "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", "%REQ(:SCHEME)%",
        "%CONNECTION_TERMINATION_DETAILS%", "%DOWNSTREAM_PEER_URI_SAN%",
    ]
    fmt = "|".join(["AL"] + ops)
    dead = free_port()
    st, port = start(strait_factory, up.port,
                     "{accessLogEncoding: TEXT, accessLogFormat: '"
                     + fmt.replace("'", "''") + "'}", dead_port=dead)
    assert curl(port, "/x?q=1", "--data-binary", "hello") == 200
    assert curl(port, "/dead") == 503
    wait_for(lambda: len(lines_with(st.log(), "AL|")) == 2, 10, "two lines")
    ok, bad = [ln.split("|") for ln in lines_with(st.log(), "AL|")]
    v = dict(zip(ops, ok[1:]))
    assert abs(int(v["%START_TIME(%s)%"]) - __import__("time").time()) < 60
    assert v["%REQ(:METHOD)%"] == "POST"
    assert v["%REQ(:PATH)%"] == "/x?q=1"
    assert v["%REQ_WITHOUT_QUERY(:PATH)%"] == "/x"
    assert v["%REQ(X-MISSING?USER-AGENT)%"] == "curl-test"
    assert v["%REQ(USER-AGENT):4%"] == "curl"
    assert v["%RESP(CONTENT-TYPE)%"].startswith("application/json")
    assert v["%RESPONSE_CODE%"] == "200"
    assert v["%RESPONSE_FLAGS%"] == "-"
    assert v["%RESPONSE_CODE_DETAILS%"] == "via_upstream"
    assert v["%UPSTREAM_HOST%"] == up.addr
    assert v["%UPSTREAM_CLUSTER%"] == "e"
    assert int(v["%DURATION%"]) >= 0
    assert v["%BYTES_RECEIVED%"] == "5"
    assert int(v["%BYTES_SENT%"]) > 0
    assert re.fullmatch(r"127\.0\.0\.1:\d+", v["%DOWNSTREAM_REMOTE_ADDRESS%"])
    assert v["%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"] == "127.0.0.1"
    assert v["%DOWNSTREAM_LOCAL_ADDRESS%"] == f"127.0.0.1:{port}"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", v["%UPSTREAM_LOCAL_ADDRESS%"])
    assert v["%REQUESTED_SERVER_NAME%"] == "-"   # plaintext: no SNI
    assert v["%UPSTREAM_TRANSPORT_FAILURE_REASON%"] == "-"
    assert v["%PROTOCOL%"] == "HTTP/1.1"
    assert v["%UPSTREAM_REQUEST_ATTEMPT_COUNT%"] == "1"
    assert v["%REQ(:AUTHORITY)%"] == f"127.0.0.1:{port}"
    assert v["%HOSTNAME%"] == socket.gethostname()
    assert v["%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%"] == \
        v["%DOWNSTREAM_REMOTE_ADDRESS%"]
    assert v["%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%"] == "127.0.0.1"
    assert v["%REQ(:SCHEME)%"] == "http"
    assert v["%CONNECTION_TERMINATION_DETAILS%"] == "-"
    assert v["%DOWNSTREAM_PEER_URI_SAN%"] == "-"   # no client certificate
    w = dict(zip(ops, bad[1:]))
    assert w["%RESPONSE_CODE%"] == "503"
    assert w["%RESPONSE_FLAGS%"] == "UF"
    assert w["%UPSTREAM_CLUSTER%"] == "d"
    assert w["%UPSTREAM_TRANSPORT_FAILURE_REASON%"] == "connection_failure"


def test_istio_json(strait_factory, up):
    st, port = start(strait_factory, up.port, "{accessLogEncoding: JSON}")
    assert curl(port, "/j", "--http2-prior-knowledge") == 200
    wait_for(lambda: lines_with(st.log(), '"user_agent":"curl-test"'), 10,
             "the JSON line")
    rec = json.loads(lines_with(st.log(), '"user_agent":"curl-test"')[0])
    assert list(rec) == ISTIO_JSON_KEYS
    assert rec["method"] == "GET" and rec["path"] == "/j"
    assert rec["protocol"] == "HTTP/2"
    assert rec["response_code"] == 200          # a number, as Envoy's
    assert isinstance(rec["bytes_sent"], int) and rec["bytes_sent"] > 0
    assert isinstance(rec["duration"], int)
    assert rec["request_id"] == "rid-1"
    assert rec["upstream_cluster"] == "e"
    assert rec["upstream_host"] == up.addr
    assert rec["route_name"] is None            # missing: null
    assert rec["response_flags"] == "-"


def test_custom_json(strait_factory, up):
    fmt = '{"code":"%RESPONSE_CODE%","line":"%REQ(:METHOD)% %REQ(:PATH)%"}'
    st, port = start(strait_factory, up.port,
                     "{accessLogEncoding: JSON, accessLogFormat: '"
                     + fmt + "'}")
    assert curl(port, "/c") == 200
    wait_for(lambda: lines_with(st.log(), '"line":"GET /c"'), 10, "line")
    rec = json.loads(lines_with(st.log(), '"line":"GET /c"')[0])
    assert rec == {"code": 200, "line": "GET /c"}


def test_strait_line_stays_default(strait_factory, up):
    st, port = start(strait_factory, up.port, "{level: info}")
    assert curl(port, "/s") == 200
    wait_for(lambda: lines_with(st.log(), "http_request"), 10, "line")
    line = lines_with(st.log(), "http_request")[0]
    assert "path=/s" in line and "status=200" in line


def test_file_reopened_on_sigusr1(strait_factory, up, tmp_path):
    path = tmp_path / "access.log"
    st, port = start(strait_factory, up.port,
                     f"{{accessLogEncoding: TEXT, accessLogFile: \"{path}\", "
                     "accessLogFormat: 'AL %REQ(:PATH)%'}")
    assert curl(port, "/one") == 200
    wait_for(lambda: path.exists() and "AL /one" in path.read_text(), 10,
             "the first line in the file")
    assert "AL /one" not in st.log()     # the file, not stderr
    os.rename(path, tmp_path / "access.log.1")
    st.signal(signal.SIGUSR1)
    wait_for(lambda: st.stats()["access_log.reopens"] == 1, 10, "the reopen")
    assert curl(port, "/two") == 200
    wait_for(lambda: path.exists() and "AL /two" in path.read_text(), 10,
             "the next line in the new file")
    assert (tmp_path / "access.log.1").read_text() == "AL /one\n"


def test_slow_writer_drops_and_counts(strait_factory, up, tmp_path):
    """The log is a FIFO nobody reads: the writer thread blocks once the
    pipe is full; lines past accessLogBuffer (16 KiB, its minimum) are
    dropped and counted, and requests go on answering. Reading the FIFO
    lets the writer go on."""
    fifo = tmp_path / "access.fifo"
    os.mkfifo(fifo)
    # Our end keeps a reader, so strait's open for writing does not wait.
    rfd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        pad = "x" * 1000
        st, port = start(
            strait_factory, up.port,
            f"{{accessLogEncoding: TEXT, accessLogFile: \"{fifo}\", "
            f"accessLogBuffer: 16KiB, accessLogFormat: 'AL {pad} "
            "%REQ(:PATH)%'}")
        n = 0
        while st.stats()["access_log.dropped"] == 0:
            assert curl(port, f"/r{n}") == 200
            n += 1
            assert n < 400, "nothing was dropped"
        s = st.stats()
        # 64 KiB in the pipe, at most 16 KiB waiting: the rest dropped.
        assert s["access_log.written"] < n
        # Drain the pipe: the writer is free again, and a request made once
        # what was waiting is written has its line.
        got = b""

        def read_some():
            nonlocal got
            try:
                while True:
                    chunk = os.read(rfd, 65536)
                    if not chunk:
                        break
                    got += chunk
            except BlockingIOError:
                pass
            if b" /after" in got:
                return True
            assert curl(port, "/after") == 200
            return False

        wait_for(read_some, 10, "a line after the writer was unblocked",
                 interval=0.1)
    finally:
        os.close(rfd)


def test_bad_format_refused(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("log:\n  accessLogEncoding: TEXT\n"
                   "  accessLogFormat: '%START_TIME% %NO_SUCH_OP% x'\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert "log.accessLogFormat: column 14: unknown operator %NO_SUCH_OP%" \
        in r.stderr, r.stderr
    cfg.write_text("log: {accessLogFormat: '%DURATION%'}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert "needs accessLogEncoding TEXT or JSON" in r.stderr, r.stderr
    cfg.write_text("log: {accessLogEncoding: JSON, "
                   "accessLogFormat: '{\"a\": \"%REQ%\"}'}\n")
    r = subprocess.run([STRAIT, "check", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1
    assert "member \"a\"" in r.stderr and "needs a header name" in r.stderr


def test_tcp_session_envoy_format(strait_factory, up, tmp_path):
    """A tcp listener's sessions take the same format (HTTP operators are
    missing: "-", %RESPONSE_CODE% 0) and go to the same file."""
    port = free_port()
    path = tmp_path / "access.log"
    yaml = (f"  - name: t\n    address: \"127.0.0.1:{port}\"\n"
            f"    upstreams: [\"127.0.0.1:{up.port}\"]\n")
    extra = (f"log: {{accessLogEncoding: TEXT, accessLogFile: \"{path}\", "
             "accessLogFormat: 'TCP %BYTES_RECEIVED% %BYTES_SENT% "
             "%UPSTREAM_HOST% %RESPONSE_CODE% %REQ(:METHOD)% "
             "%DOWNSTREAM_LOCAL_ADDRESS% %UPSTREAM_LOCAL_ADDRESS%'}\n")
    st = strait_factory(yaml, extra=extra, workers=1).start()
    assert curl(port, "/tcp", "-H", "Connection: close") == 200
    wait_for(lambda: path.exists() and "TCP " in path.read_text(), 10,
             "the session's line")
    line = [ln for ln in path.read_text().splitlines() if "TCP " in ln][0]
    m = re.fullmatch(r"TCP (\d+) (\d+) 127\.0\.0\.1:(\d+) 0 - "
                     r"127\.0\.0\.1:(\d+) 127\.0\.0\.1:(\d+)", line)
    assert m, line
    assert int(m.group(1)) > 0 and int(m.group(2)) > 0
    assert int(m.group(3)) == up.port and int(m.group(4)) == port
    assert "tcp_session" not in st.log()


def test_bad_format_on_reload_refused(strait_factory, up):
    """A reload with a format that does not compile is refused; the
    running format stays."""
    st, port = start(strait_factory, up.port,
                     "{accessLogEncoding: TEXT, accessLogFormat: 'OK %REQ(:PATH)%'}")
    text = st.config.read_text().replace("OK %REQ(:PATH)%", "OK %NOPE%")
    st.config.write_text(text)
    st.signal(signal.SIGHUP)
    wait_for(lambda: st.stats()["server.reloads_failed"] == 1, 10,
             "the refused reload")
    assert "unknown operator %NOPE%" in st.stats()["server.last_reload_error"]
    assert curl(port, "/still") == 200
    wait_for(lambda: "OK /still" in st.log(), 10, "a line in the old format")
