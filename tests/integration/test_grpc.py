"""gRPC end to end through strait: an h2c listener in front of a grpcio
server, with grpcio clients. Methods are generic (bytes in, bytes out), so
no generated code is needed."""
import subprocess
import threading
import time
from concurrent import futures

import grpc
import pytest

from conftest import free_port, http_gateway, wait_for


def handlers():
    def unary(req, ctx):
        if req == b"fail":
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "told to fail")
        ctx.set_trailing_metadata((("x-trailer", "t1"),))
        return b"echo:" + req

    def server_stream(req, ctx):
        for i in range(int(req)):
            yield b"%d" % i

    def client_stream(it, ctx):
        return b"%d" % sum(len(x) for x in it)

    def bidi(it, ctx):
        for x in it:
            yield x.upper()

    def slow(req, ctx):
        time.sleep(5)
        return b"late"

    return grpc.method_handlers_generic_handler("t.S", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    })


@pytest.fixture
def grpc_backend():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0).wait(5)


def gateway(strait_factory, backend_port, route_extra=""):
    port = free_port()
    yaml = (f"  - name: g\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /, cluster: grpc{route_extra}}}\n")
    extra = (f"clusters:\n  - name: grpc\n    endpoints: [\"127.0.0.1:{backend_port}\"]\n"
             f"    protocol: http2\n")
    st = strait_factory(yaml, extra=extra).start()
    return st, port


def grpc_gateway(strait_factory, tmp_path, backend_port, rules="", extra=""):
    """A Gateway (protocol GRPC) routing every call to the gRPC server on
    backend_port; rules: more keys of the http rule (match, retries...);
    extra: more YAML documents, each starting with ---. Returns (strait,
    port)."""
    conf = tmp_path / "conf.d"
    conf.mkdir()
    port = free_port()
    (conf / "r.yaml").write_text(f"""{http_gateway(port, protocol="GRPC")}apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: g, namespace: default}}
spec:
  hosts: [g.example.com]
  resolution: STATIC
  ports: [{{number: {backend_port}, name: grpc, protocol: GRPC}}]
  endpoints: [{{address: 127.0.0.1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - {rules}
    route:
    - destination: {{host: g.example.com}}
{extra}""")
    st = strait_factory(extra=f"config: {{dir: \"{conf}\"}}\n").start()
    return st, port


def test_unary_with_trailers(strait_factory, grpc_backend):
    st, port = gateway(strait_factory, grpc_backend)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary("/t.S/Unary")
        resp, info = call.with_call(b"hi", timeout=10)
        assert resp == b"echo:hi"
        assert ("x-trailer", "t1") in info.trailing_metadata()
        with pytest.raises(grpc.RpcError) as e:
            call(b"fail", timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.value.details() == "told to fail"
    # Access lines are written by the log's writer thread: wait for it.
    wait_for(lambda: "protocol=HTTP/2 status=200" in st.log(), 10,
             "the access log line")


def test_streaming_all_kinds(strait_factory, grpc_backend):
    st, port = gateway(strait_factory, grpc_backend)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        got = list(ch.unary_stream("/t.S/ServerStream")(b"1000", timeout=20))
        assert got == [b"%d" % i for i in range(1000)]
        total = ch.stream_unary("/t.S/ClientStream")(
            iter([b"x" * 1000] * 500), timeout=20)
        assert total == b"500000"
        out = list(ch.stream_stream("/t.S/Bidi")(
            iter([b"abc", b"def"] * 200), timeout=20))
        assert out == [b"ABC", b"DEF"] * 200


def test_large_messages(strait_factory, grpc_backend):
    st, port = gateway(strait_factory, grpc_backend)
    big = bytes(range(256)) * (3 * 1024 * 4)  # 3 MiB
    opts = [("grpc.max_receive_message_length", 16 << 20),
            ("grpc.max_send_message_length", 16 << 20)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        assert ch.unary_unary("/t.S/Unary")(big, timeout=20) == b"echo:" + big


def test_grpc_timeout_is_the_request_deadline(strait_factory, upstream_factory):
    """curl sends grpc-timeout without a deadline of its own, to an upstream
    that ignores it (a gRPC server would enforce it too and race us):
    strait must end the call at that deadline with DEADLINE_EXCEEDED."""
    from conftest import recv_all
    up = upstream_factory(lambda c: recv_all(c))
    port = free_port()
    yaml = (f"  - name: g\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /, cluster: slow}}\n")
    extra = f"clusters:\n  - name: slow\n    endpoints: [\"{up.addr}\"]\n"
    st = strait_factory(yaml, extra=extra).start()
    t0 = time.monotonic()
    r = subprocess.run(
        ["curl", "-s", "-D", "-", "-o", "/dev/null", "--http2-prior-knowledge",
         "-X", "POST", "-H", "content-type: application/grpc",
         "-H", "te: trailers", "-H", "grpc-timeout: 300m",
         "--data-binary", "@-", f"http://127.0.0.1:{port}/t.S/Slow"],
        input=b"\x00\x00\x00\x00\x00", capture_output=True, timeout=30)
    elapsed = time.monotonic() - t0
    headers = r.stdout.decode().lower()
    assert "grpc-status: 4" in headers, headers
    assert elapsed < 10  # the upstream never answers at all
    wait_for(lambda: "flags=UT" in st.log(), 10, "UT in the access log")


def test_unknown_route_is_unimplemented(strait_factory, grpc_backend):
    port = free_port()
    yaml = (f"  - name: g\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes:\n      - {{host: \"*\", pathPrefix: /other, cluster: grpc}}\n")
    extra = (f"clusters:\n  - name: grpc\n    endpoints: [\"127.0.0.1:{grpc_backend}\"]\n"
             f"    protocol: http2\n")
    strait_factory(yaml, extra=extra).start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/t.S/Unary")(b"x", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_backend_down_is_unavailable(strait_factory):
    dead = free_port()
    st, port = gateway(strait_factory, dead)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/t.S/Unary")(b"x", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_many_concurrent_calls_one_connection(strait_factory, grpc_backend):
    st, port = gateway(strait_factory, grpc_backend)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary("/t.S/Unary")
        futs = [call.future(b"%d" % i, timeout=20) for i in range(300)]
        assert [f.result() for f in futs] == [b"echo:%d" % i for i in range(300)]


def test_istio_metrics_grpc(strait_factory, tmp_path, grpc_backend):
    """Istio's gRPC labels and message counters: request_protocol grpc,
    grpc_response_status from the trailers (or a trailers-only answer),
    istio_request_messages_total / istio_response_messages_total counted
    in the streams, messages split across DATA frames included."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families

    st, port = grpc_gateway(strait_factory, tmp_path, grpc_backend)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert len(list(ch.unary_stream("/t.S/ServerStream")(
            b"300", timeout=20))) == 300
        # 3 messages of 100 KiB: each spans several DATA frames.
        assert ch.stream_unary("/t.S/ClientStream")(
            iter([b"x" * 102400] * 3), timeout=20) == b"307200"
        with pytest.raises(grpc.RpcError):
            ch.unary_unary("/t.S/Unary")(b"fail", timeout=10)
    with urllib.request.urlopen(st.url("/stats/prometheus"), timeout=5) as r:
        text = r.read().decode()

    def val(name, **want):
        got = [s.value for f in text_string_to_metric_families(text)
               for s in f.samples if s.name == name
               and all(s.labels.get(k) == v for k, v in want.items())]
        return sum(got) if got else None

    ok = dict(request_protocol="grpc", response_code="200",
              grpc_response_status="0", destination_service="g.example.com")
    assert val("istio_requests_total", **ok) == 2
    assert val("istio_request_messages_total", **ok) == 1 + 3
    assert val("istio_response_messages_total", **ok) == 300 + 1
    # FAILED_PRECONDITION is 9; the HTTP status stays 200.
    assert val("istio_requests_total", request_protocol="grpc",
               response_code="200", grpc_response_status="9") == 1


def test_call_without_a_message_reaches_the_backend_at_once(
        strait_factory, tmp_path, grpc_backend):
    """Issue 28 said a gRPC call with no message waited 10 s. A unary call
    whose HEADERS carry END_STREAM (no DATA frame at all) goes through the
    GRPC Gateway with its end: the backend answers at once that the method
    needs a message (grpc-status 12), which it can only say once it saw
    the stream end; a stream held open would get no answer (the socket's
    timeout only ends a hung test). A client-streaming call with no
    message is answered too. (It did not reproduce on this code.)"""
    import socket
    import h2.config
    import h2.connection
    import h2.events
    st, port = grpc_gateway(strait_factory, tmp_path, grpc_backend)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    c = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "POST"), (":scheme", "http"),
                       (":path", "/t.S/Unary"),
                       (":authority", "g.example.com"),
                       ("content-type", "application/grpc"),
                       ("te", "trailers")], end_stream=True)
    s.sendall(c.data_to_send())
    headers, ended = {}, False
    try:
        for _ in range(100):
            data = s.recv(65535)
            assert data, "the connection closed without an answer"
            for e in c.receive_data(data):
                if isinstance(e, (h2.events.ResponseReceived,
                                  h2.events.TrailersReceived)):
                    headers.update(dict(e.headers))
                if isinstance(e, h2.events.StreamEnded):
                    ended = True
                assert not isinstance(e, h2.events.StreamReset), e
            s.sendall(c.data_to_send())
            if ended:
                break
    finally:
        s.close()
    assert ended
    assert headers[b"grpc-status"] == b"12", headers
    assert b"requires exactly one request message" in \
        headers[b"grpc-message"], headers
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        assert ch.stream_unary("/t.S/ClientStream")(iter([]),
                                                    timeout=30) == b"0"
