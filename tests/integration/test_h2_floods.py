"""HTTP/2 floods built from raw frames: each ends the connection and is
counted in /stats, while other clients keep working."""
import socket
import struct

from conftest import free_port, wait_for

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, CONTINUATION = 0, 1, 4, 6, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


# A literal-header HPACK block for GET / on http://x (no Huffman, no index).
def hpack_lit(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


REQ = (hpack_lit(b":method", b"GET") + hpack_lit(b":scheme", b"http") +
       hpack_lit(b":path", b"/") + hpack_lit(b":authority", b"x"))


def listener(strait_factory):
    port = free_port()
    yaml = (f"  - name: h\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes: [{{host: nomatch.invalid, pathPrefix: /, cluster: c}}]\n")
    extra = f"clusters:\n  - {{name: c, endpoints: [\"127.0.0.1:{free_port()}\"]}}\n"
    return strait_factory(yaml, workers=1, extra=extra).start(), port


def connect(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return c


def closed_by_peer(c):
    """Reads until the peer closes; True if it did within the timeout."""
    try:
        while c.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def still_serves(port):
    c = connect(port)
    c.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 1, REQ))
    data = b""
    while b"\x00\x00" not in data:  # any answer frames at all
        d = c.recv(65536)
        if not d:
            break
        data += d
    c.close()
    return len(data) > 0


def test_continuation_flood(strait_factory):
    st, port = listener(strait_factory)
    c = connect(port)
    c.sendall(frame(HEADERS, 0, 1, REQ[:10]))
    try:
        for _ in range(100):
            c.sendall(frame(CONTINUATION, 0, 1, b""))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert closed_by_peer(c)
    c.close()
    wait_for(lambda: st.stats()["listener.h.http2.continuation_flood"] == 1, 10,
             "the counter")
    assert still_serves(port)


def test_ping_flood(strait_factory):
    st, port = listener(strait_factory)
    c = connect(port)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        # Never read the PING ACKs: they pile up past nghttp2's bound.
        c.sendall(b"".join(frame(PING, 0, 0, struct.pack(">Q", i))
                           for i in range(20000)))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert closed_by_peer(c)
    c.close()
    wait_for(lambda: st.stats()["listener.h.http2.flood"] >= 1, 10, "the counter")
    assert still_serves(port)


def test_empty_data_frame_flood(strait_factory, upstream_factory):
    # The stream must stay open: route it to an upstream that just reads.
    from conftest import recv_all
    up = upstream_factory(lambda sock: recv_all(sock))
    port = free_port()
    yaml = (f"  - name: h\n    address: \"127.0.0.1:{port}\"\n    protocol: http\n"
            f"    routes: [{{host: \"*\", pathPrefix: /, cluster: c}}]\n")
    extra = f"clusters:\n  - {{name: c, endpoints: [\"{up.addr}\"]}}\n"
    st = strait_factory(yaml, workers=1, extra=extra).start()
    c = connect(port)
    req = REQ.replace(b"GET", b"PUT")
    c.sendall(frame(HEADERS, END_HEADERS, 1, req))
    try:
        for _ in range(200):
            c.sendall(frame(DATA, 0, 1, b""))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert closed_by_peer(c)
    c.close()
    wait_for(lambda: st.stats()["listener.h.http2.flood"] == 1, 10, "the counter")
