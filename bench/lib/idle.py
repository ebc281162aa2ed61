#!/usr/bin/python3
"""Open N keep-alive connections, one request each, and hold them.

    idle.py PORT N tls|plain

Each connection sends one HTTP/1.1 GET /64 (over TLS 1.3 with ALPN
http/1.1 when asked) and reads the whole response, then stays open and
quiet. When all are open it prints "ready N ERRORS" and sleeps until it
is killed; bench/run measures the proxy's RSS meanwhile.
"""
import concurrent.futures
import os
import signal
import socket
import ssl
import sys
import time

# A stalled connection (no response within this long) counts as an error.
IO_TIMEOUT = 5.0
# Connections being opened at once.
PARALLEL = 16
REQ = b"GET /64 HTTP/1.1\r\nHost: localhost\r\n\r\n"


def read_response(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the response head")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(head.split(b"\r\n")[0].decode(errors="replace"))
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed in the body")
        body += chunk


def open_one(port, ctx):
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    try:
        if ctx is not None:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        s.sendall(REQ)
        read_response(s)
    except BaseException:
        s.close()
        raise
    return s


def main():
    port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ctx = None
    if mode == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols(["http/1.1"])
    # A few connections at a time, so one slow answer (a delayed ACK, say)
    # does not serialise the whole run; the result is the same set of
    # idle connections.
    conns, errors = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futs = [pool.submit(open_one, port, ctx) for _ in range(n)]
        for f in futs:
            try:
                conns.append(f.result())
            except (OSError, ConnectionError) as e:
                errors += 1
                if errors <= 3:
                    print("error:", e, file=sys.stderr, flush=True)
    print("ready %d %d" % (len(conns), errors), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
