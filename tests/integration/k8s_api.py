"""A Kubernetes API stand-in for strait's tests (no kube-apiserver can be
installed here). It serves what a list-then-watch client uses, over HTTPS
with a test CA and a bearer-token check:

- GET /api/v1/[namespaces/NS/]PLURAL and /apis/G/V/[namespaces/NS/]PLURAL:
  a list (items without apiVersion/kind, as the real server writes typed
  lists), labelSelector (k=v, k!=v), fieldSelector (type!=X, type=X,
  metadata.name=X), limit and continue tokens;
- ?watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T:
  chunked NDJSON events ADDED/MODIFIED/DELETED from RV on, BOOKMARKs,
  the stream ended after T seconds (or watch_timeout_cap), and an RV
  older than the history kept (compact()) answered with a 200 stream
  whose one event is ERROR with a Status code 410 reason Expired (or, with
  expired_as_status, a plain 410 answer);
- a kind in missing (a CRD not installed) is answered 404.

resourceVersions are decimal strings of one counter shared by every kind,
as etcd's revision is. Per (plural, namespace, labelSelector,
fieldSelector): watches open now, the most open at once, and the total
made (watch_stats()). Everything runs in the test's process, in threads.
"""
import base64
import bisect
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = {
    # plural: (group path, apiVersion, kind, namespaced)
    "gateways": ("/apis/networking.istio.io/v1", "networking.istio.io/v1", "Gateway", True),
    "virtualservices": ("/apis/networking.istio.io/v1", "networking.istio.io/v1", "VirtualService", True),
    "destinationrules": ("/apis/networking.istio.io/v1", "networking.istio.io/v1", "DestinationRule", True),
    "serviceentries": ("/apis/networking.istio.io/v1", "networking.istio.io/v1", "ServiceEntry", True),
    "workloadentries": ("/apis/networking.istio.io/v1", "networking.istio.io/v1", "WorkloadEntry", True),
    "authorizationpolicies": ("/apis/security.istio.io/v1", "security.istio.io/v1", "AuthorizationPolicy", True),
    "peerauthentications": ("/apis/security.istio.io/v1", "security.istio.io/v1", "PeerAuthentication", True),
    "requestauthentications": ("/apis/security.istio.io/v1", "security.istio.io/v1", "RequestAuthentication", True),
    "luapolicies": ("/apis/strait.io/v1alpha1", "strait.io/v1alpha1", "LuaPolicy", True),
    "meshlinks": ("/apis/strait.io/v1alpha1", "strait.io/v1alpha1", "MeshLink", True),
    "services": ("/api/v1", "v1", "Service", True),
    "endpointslices": ("/apis/discovery.k8s.io/v1", "discovery.k8s.io/v1", "EndpointSlice", True),
    "secrets": ("/api/v1", "v1", "Secret", True),
    "namespaces": ("/api/v1", "v1", "Namespace", False),
    "nodes": ("/api/v1", "v1", "Node", False),
    "pods": ("/api/v1", "v1", "Pod", True),
    # The Gateway API; its Gateway shares a plural with Istio's, so it is
    # held under the plural qualified by its group.
    "referencegrants": ("/apis/gateway.networking.k8s.io/v1beta1",
                        "gateway.networking.k8s.io/v1beta1", "ReferenceGrant", True),
    "gatewayclasses": ("/apis/gateway.networking.k8s.io/v1",
                       "gateway.networking.k8s.io/v1", "GatewayClass", False),
    "gateways.gateway.networking.k8s.io": ("/apis/gateway.networking.k8s.io/v1",
                                           "gateway.networking.k8s.io/v1", "Gateway", True),
    "httproutes": ("/apis/gateway.networking.k8s.io/v1",
                   "gateway.networking.k8s.io/v1", "HTTPRoute", True),
}
PLURAL_OF = {v[2]: k for k, v in KINDS.items() if k != "gateways.gateway.networking.k8s.io"}


def plural_of(kind, api_version=""):
    """The key an object of kind (and apiVersion) is held under."""
    if kind == "Gateway" and api_version.startswith("gateway.networking.k8s.io/"):
        return "gateways.gateway.networking.k8s.io"
    return PLURAL_OF[kind]


def make_pki(d):
    """A test CA and a server certificate for 127.0.0.1 signed by it.
    Returns (ca_crt, server_crt, server_key)."""
    os.makedirs(d, exist_ok=True)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = (os.path.join(d, n) for n in ("api.key", "api.csr", "api.crt"))
    ext = os.path.join(d, "ext.cnf")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, timeout=60)
    run("openssl", "req", "-x509", "-nodes", *ec, "-keyout", ca_key, "-out", ca_crt,
        "-days", "2", "-subj", "/CN=test-kubernetes-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-new", "-nodes", *ec, "-keyout", key, "-out", csr,
        "-subj", "/CN=kube-apiserver")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
                "extendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
        "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext)
    return ca_crt, crt, key


def make_client_cert(d, cn):
    """A client certificate for user cn signed by make_pki()'s CA in d
    (the API server's x509 client authentication). Returns (crt, key)."""
    key, csr, crt = (os.path.join(d, f"{cn}.{e}") for e in ("key", "csr", "crt"))
    ext = os.path.join(d, f"{cn}.cnf")
    with open(ext, "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, timeout=60)
    run("openssl", "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
        "ec_paramgen_curve:prime256v1", "-keyout", key, "-out", csr,
        "-subj", f"/CN={cn}/O=system:masters")
    run("openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(d, "ca.crt"),
        "-CAkey", os.path.join(d, "ca.key"), "-CAcreateserial", "-out", crt,
        "-days", "2", "-extfile", ext)
    return crt, key


def _match_labels(obj, sel):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, sel.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v.lstrip("="):
                return False
        elif labels.get(term) is None:
            return False
    return True


def _field(obj, path):
    cur = obj
    for p in path.split("."):
        cur = (cur or {}).get(p) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def _match_fields(obj, sel):
    for term in filter(None, sel.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if _field(obj, k) == v:
                return False
        else:
            k, v = term.split("=", 1)
            if _field(obj, k) != v.lstrip("="):
                return False
    return True


class KubeAPI:
    def __init__(self, tmpdir, port=0, tokens=("test-token",), pki=None):
        self.tmpdir = str(tmpdir)
        self.pki = pki or make_pki(os.path.join(self.tmpdir, "k8s-pki"))
        self.ca, self.crt, self.key = self.pki
        self.tokens = set(tokens)
        self.lock = threading.Condition()
        self.rv = 100
        self.objects = {p: {} for p in KINDS}      # plural -> (ns,name) -> obj
        self.history = []                          # (rv, plural, type, obj)
        self.hist_rvs = []                         # the rvs of history
        self.stopping = False
        self.paused = False                        # watches hold events
        self.fail_with = None                      # answer every request so
        self.oldest = 0                            # events before: expired
        self.missing = set()                       # plurals answered 404
        self.expired_as_status = False
        self.watch_timeout_cap = None              # seconds; None: as asked
        self.ignore_timeout = False                # never end a watch
        self.bookmark_every = 1.0
        self.requests = []                         # (time, method, path, token)
        self.watches = {}                          # key -> [open, max, total]
        self.watch_starts = []                     # (time, key)
        self.gen = 0                               # bumped to cut watches
        self.port = port
        self.server = None
        self.start()

    # -- the server ------------------------------------------------------

    def start(self):
        api = self
        self.stopping = False

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                api._handle(self)

        class Server(ThreadingHTTPServer):
            # A real API server's backlog, not socketserver's 5: a burst
            # of watches must not be smoothed by SYN retransmits here.
            request_queue_size = 1024
            allow_reuse_address = True

        srv = Server(("127.0.0.1", self.port), Handler)
        srv.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.crt, self.key)
        # x509 client authentication, as the API server's: a client
        # certificate from the CA stands for a token.
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(self.ca)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        self.port = srv.server_address[1]
        self.server = srv
        self.conns = set()
        self.thread = threading.Thread(target=srv.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        """Stops listening and cuts every connection (an API restart)."""
        with self.lock:
            self.gen += 1
            self.stopping = True
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(10)

    def restart(self, down_for=0.0):
        self.stop()
        if down_for:
            time.sleep(down_for)  # the outage itself, not a synchronisation
        self.start()

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    # -- the store -------------------------------------------------------

    def _bump(self):
        self.rv += 1
        return str(self.rv)

    def apply(self, obj):
        """Creates or replaces obj (a dict with apiVersion, kind,
        metadata.name[, namespace]); returns its resourceVersion."""
        plural = plural_of(obj["kind"], obj.get("apiVersion", ""))
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        with self.lock:
            typ = "MODIFIED" if key in self.objects[plural] else "ADDED"
            o = json.loads(json.dumps(obj))
            o["metadata"]["resourceVersion"] = self._bump()
            o["metadata"]["managedFields"] = [{"manager": "kubectl"}]
            self.objects[plural][key] = o
            self.history.append((self.rv, plural, typ, o))
            self.hist_rvs.append(self.rv)
            self.lock.notify_all()
            return o["metadata"]["resourceVersion"]

    def delete(self, kind, ns, name, api_version=""):
        plural = plural_of(kind, api_version)
        with self.lock:
            o = self.objects[plural].pop((ns, name))
            o = json.loads(json.dumps(o))
            o["metadata"]["resourceVersion"] = self._bump()
            self.history.append((self.rv, plural, "DELETED", o))
            self.hist_rvs.append(self.rv)
            self.lock.notify_all()

    def compact(self):
        """Forgets every event so far: a watch from an older
        resourceVersion gets 410 Expired."""
        with self.lock:
            self.history = []
            self.hist_rvs = []
            self.oldest = self.rv
            self.lock.notify_all()

    def cut_watches(self):
        """Ends every watch stream cleanly (as a server-side timeout)."""
        with self.lock:
            self.gen += 1
            self.lock.notify_all()

    def watch_stats(self):
        with self.lock:
            return {k: list(v) for k, v in self.watches.items()}

    def open_watches(self):
        with self.lock:
            return sum(v[0] for v in self.watches.values())

    def total_watches(self):
        with self.lock:
            return sum(v[2] for v in self.watches.values())

    # -- requests --------------------------------------------------------

    def _route(self, path):
        parts = [p for p in path.split("/") if p]
        # api/v1/... or apis/G/V/...
        base = 2 if parts[:1] == ["api"] else 3
        rest = parts[base:]
        ns = ""
        if len(rest) == 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if len(rest) != 1:
            return None, None
        plural = rest[0]
        if base == 3 and f"{plural}.{parts[1]}" in KINDS:
            plural = f"{plural}.{parts[1]}"
        if plural not in KINDS:
            return None, None
        if "/" + "/".join(parts[:base]) != KINDS[plural][0]:
            return None, None
        return plural, ns

    def _reply(self, h, code, body):
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _status(self, h, code, reason, message):
        self._reply(h, code, {"kind": "Status", "apiVersion": "v1",
                              "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason,
                              "code": code})

    def _handle(self, h):
        self.conns.add(h.connection)
        u = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        auth = h.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        peer = h.connection.getpeercert() if hasattr(h.connection, "getpeercert") else None
        if token is None and peer:
            cn = dict(x[0] for x in peer["subject"]).get("commonName")
            token = f"x509:{cn}"

        with self.lock:
            self.requests.append((time.monotonic(), "GET", h.path, token))
        if self.fail_with is not None:
            return self._status(h, self.fail_with, "ServiceUnavailable",
                                "the stand-in is told to fail")
        if token not in self.tokens:
            return self._status(h, 401, "Unauthorized", "Unauthorized")
        plural, ns = self._route(u.path)
        if plural is None:
            return self._status(h, 404, "NotFound", "the server could not find the requested resource")
        if plural in self.missing:
            return self._status(h, 404, "NotFound", "the server could not find the requested resource")
        lsel = q.get("labelSelector", "")
        fsel = q.get("fieldSelector", "")
        if q.get("watch") in ("1", "true"):
            return self._watch(h, plural, ns, lsel, fsel, q)
        return self._list(h, plural, ns, lsel, fsel, q)

    def _selected(self, plural, ns, lsel, fsel, o):
        m = o["metadata"]
        return ((not ns or m.get("namespace", "") == ns) and
                _match_labels(o, lsel) and _match_fields(o, fsel))

    @staticmethod
    def _item(o):
        o = dict(o)
        o.pop("apiVersion", None)
        o.pop("kind", None)
        return o

    def _list(self, h, plural, ns, lsel, fsel, q):
        with self.lock:
            if "continue" in q:
                c = json.loads(base64.b64decode(q["continue"]))
                rv, start = c["rv"], c["start"]
                if rv < self.oldest:
                    return self._status(h, 410, "Expired", "The provided continue parameter is too old")
                items = c["items"]
            else:
                rv, start = self.rv, 0
                items = sorted(k for k, o in self.objects[plural].items()
                               if self._selected(plural, ns, lsel, fsel, o))
                items = [list(k) for k in items]
            limit = int(q.get("limit", "0") or 0)
            end = len(items) if limit <= 0 else min(len(items), start + limit)
            out = [self._item(self.objects[plural][tuple(k)])
                   for k in items[start:end] if tuple(k) in self.objects[plural]]
            meta = {"resourceVersion": str(rv)}
            if end < len(items):
                meta["continue"] = base64.b64encode(json.dumps(
                    {"rv": rv, "start": end, "items": items}).encode()).decode()
        g, av, kind, _ = KINDS[plural]
        self._reply(h, 200, {"kind": kind + "List", "apiVersion": av,
                             "metadata": meta, "items": out})

    def _watch(self, h, plural, ns, lsel, fsel, q):
        key = (plural, ns, lsel, fsel)
        rv = int(q.get("resourceVersion") or "0")
        timeout = float(q.get("timeoutSeconds") or "1800")
        if self.watch_timeout_cap is not None:
            timeout = min(timeout, self.watch_timeout_cap)
        if self.ignore_timeout:
            timeout = 3600.0
        bookmarks = q.get("allowWatchBookmarks") == "true"
        with self.lock:
            expired = rv and rv < self.oldest
            if expired and self.expired_as_status:
                return self._status(h, 410, "Expired", f"too old resource version: {rv} ({self.oldest})")
            st = self.watches.setdefault(key, [0, 0, 0])
            st[0] += 1
            st[1] = max(st[1], st[0])
            st[2] += 1
            self.watch_starts.append((time.monotonic(), key))
            gen = self.gen
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()

            def send(ev):
                data = json.dumps(ev).encode() + b"\n"
                h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                h.wfile.flush()

            if expired:
                send({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "Expired", "code": 410,
                    "message": f"too old resource version: {rv} ({self.oldest})"}})
                h.wfile.write(b"0\r\n\r\n")
                return
            deadline = time.monotonic() + timeout
            scan = rv
            last_bm = time.monotonic()
            while True:
                with self.lock:
                    if self.gen != gen:
                        break
                    evs = []
                    if self.paused:
                        self.lock.wait(0.05)
                        continue
                    pos = bisect.bisect_right(self.hist_rvs, scan)
                    for erv, p, typ, o in self.history[pos:]:
                        if p == plural and self._selected(p, ns, lsel, fsel, o):
                            evs.append({"type": typ, "object": o})
                    if self.hist_rvs:
                        scan = max(scan, self.hist_rvs[-1])
                    cur_rv = self.rv
                    now = time.monotonic()
                    if not evs and now < deadline and not (
                            bookmarks and now - last_bm >= self.bookmark_every):
                        self.lock.wait(min(0.2, max(0.01, deadline - now)))
                        continue
                for ev in evs:
                    send(ev)
                if time.monotonic() >= deadline:
                    break
                if bookmarks and time.monotonic() - last_bm >= self.bookmark_every:
                    g, av, kind, _ = KINDS[plural]
                    send({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": av,
                        "metadata": {"resourceVersion": str(cur_rv)}}})
                    last_bm = time.monotonic()
            if self.stopping:
                h.connection.shutdown(socket.SHUT_RDWR)  # cut, no last chunk
            else:
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
        except OSError:
            pass
        finally:
            with self.lock:
                self.watches[key][0] -= 1
            h.close_connection = True
