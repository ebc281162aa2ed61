#!/usr/bin/python3
"""Summarise bench/run's raw records into a table and a JSON file.

    report.py RAW.jsonl OUT.json [key=value...]

RAW.jsonl holds one record per measured run (see lib/record.py). For each
scenario, worker count and proxy this prints the median of the runs with
their min-max spread, and each median as a ratio to strait's (xS) and to
the upstream measured directly (xD). key=value pairs go into the JSON's
"meta". Standard library only.
"""
import json
import statistics
import sys

# scenario -> (title, [(field, label, lower_is_better)])
SCENARIOS = [
    ("h1", "HTTP/1.1 keep-alive, plaintext (wrk -t1 -c64, GET /64)",
     [("rate", "req/s", False), ("per_cpu", "req/CPU-s", False)]),
    ("h2tls", "HTTP/2 over TLS 1.3 (h2load -t1 -c8 -m16, GET /64)",
     [("rate", "req/s", False), ("per_cpu", "req/CPU-s", False)]),
    ("tlshs", "new TLS 1.3 connections, full handshake + one GET /64 each (openssl s_time -new)",
     [("rate", "hs/s", False), ("per_cpu", "hs/CPU-s", False)]),
    ("latency", "latency at a fixed rate, HTTP/1.1 plaintext (h2load --h1 --rps, GET /64)",
     [("p50_ms", "p50 ms", True), ("p99_ms", "p99 ms", True), ("p999_ms", "p99.9 ms", True),
      ("per_cpu", "req/CPU-s", False)]),
    ("body", "large body, HTTP/1.1 plaintext (wrk -t1 -c8, GET /1m)",
     [("mib_s", "MiB/s", False), ("mib_cpu", "MiB/CPU-s", False)]),
    ("tcp", "TCP relay of HTTP/1.1 (wrk -t1 -c8, GET /1m through the TCP listener)",
     [("mib_s", "MiB/s", False), ("mib_cpu", "MiB/CPU-s", False)]),
    ("hbone", "HBONE, strait only: the tcp load (wrk -t1 -c8, GET /1m) through a plain relay, one HBONE "
              "tunnel (client and server in one process) and double HBONE (two processes, CPU summed)",
     [("mib_s", "MiB/s", False), ("mib_cpu", "MiB/CPU-s", False)]),
    ("idle", "idle keep-alive connections, plaintext HTTP/1.1: RSS growth per connection",
     [("bytes_per_conn", "B/conn", True)]),
    ("idletls", "idle keep-alive connections, TLS 1.3 HTTP/1.1: RSS growth per connection",
     [("bytes_per_conn", "B/conn", True)]),
]
PROXIES = ["direct", "base", "base-gw", "strait", "strait-nm", "strait-gw",
           "strait-gw-nm", "strait-gw-lua", "strait-gw-rl", "haproxy", "nginx",
           "strait-relay", "strait-hbone", "strait-hbone2"]
# The rows a scenario's ratio column divides by, when not strait's, and
# the column's name: the hbone rows are compared with the plain relay of
# the same run (xR).
REFERENCE = {"hbone": ("strait-relay", "xR")}
# The hbone scenario's tunnel rows, as named in the summary.
HBONE_ROWS = [("strait-hbone", "HBONE (one tunnel, client and server in one process)"),
              ("strait-hbone2", "double HBONE (two processes)")]


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    for r in recs:
        # s_time reports no rate of its own: handshakes over the wall time.
        if r.get("scenario") == "tlshs" and r.get("count") and r.get("wall_s"):
            r["rate"] = r["count"] / r["wall_s"]
    return recs


def summarise(recs):
    """{(scenario, workers, proxy): {field: {median, min, max, n}, runs, failed}}"""
    groups = {}
    for r in recs:
        key = (r.get("scenario"), r.get("workers"), r.get("proxy"))
        groups.setdefault(key, []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("ok")]
        entry = {"runs": len(rs), "failed": len(rs) - len(ok),
                 "why": sorted({r.get("why", "") for r in rs if not r.get("ok")} - {""})}
        fields = {f for _, _, ms in SCENARIOS for f, _, _ in ms}
        for f in fields:
            vals = [r[f] for r in ok if isinstance(r.get(f), (int, float))]
            if vals:
                entry[f] = {"median": statistics.median(vals), "min": min(vals),
                            "max": max(vals), "n": len(vals)}
        out[key] = entry
    return out


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return "{:,.0f}".format(v)
    if a >= 10:
        return "{:.1f}".format(v)
    if a >= 1:
        return "{:.2f}".format(v)
    return "{:.3f}".format(v)


def cell(stat):
    if not stat:
        return "-"
    if stat["n"] == 1:
        return fmt(stat["median"])
    return "%s [%s-%s]" % (fmt(stat["median"]), fmt(stat["min"]), fmt(stat["max"]))


def ratio(a, b):
    if not a or not b or not b.get("median"):
        return "-"
    return "%.2f" % (a["median"] / b["median"])


def table(summary):
    lines = []
    for scen, title, metrics in SCENARIOS:
        keys = [k for k in summary if k[0] == scen]
        if not keys:
            continue
        workers = sorted({k[1] for k in keys if k[2] != "direct"}, key=str)
        direct = next((summary[k] for k in keys if k[2] == "direct"), None)
        lines.append("")
        lines.append("== %s: %s" % (scen, title))
        ref_proxy, ref_label = REFERENCE.get(scen, ("strait", "xS"))
        head = ["proxy", "w"]
        for _, label, _ in metrics:
            head += [label, ref_label, "xD"]
        rows = [head]
        if direct:
            row = ["direct", "-"]
            for f, _, _ in metrics:
                row += [cell(direct.get(f)), "", ""]
            rows.append(row)
        for w in workers:
            ref = summary.get((scen, w, ref_proxy), {})
            for p in PROXIES[1:]:
                e = summary.get((scen, w, p))
                if e is None:
                    continue
                row = [p + ("!" if e["failed"] else ""), str(w)]
                for f, _, _ in metrics:
                    row += [cell(e.get(f)), ratio(e.get(f), ref.get(f)),
                            ratio(e.get(f), (direct or {}).get(f))]
                rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        for r in rows:
            lines.append("  ".join(c.rjust(widths[i]) if i else c.ljust(widths[i])
                                   for i, c in enumerate(r)).rstrip())
    return lines


def hbone_ratios(summary):
    """The hbone scenario's tunnel rows as ratios to the plain relay of the
    same run, per worker count: [{workers, row, field, ratio, value, relay}]."""
    res = []
    workers = sorted({k[1] for k in summary if k[0] == "hbone"}, key=str)
    for w in workers:
        for row, _ in HBONE_ROWS:
            for f in ("mib_cpu", "mib_s"):
                v, r = med(summary, ("hbone", w, row), f), med(summary, ("hbone", w, "strait-relay"), f)
                if v and r:
                    res.append({"workers": w, "row": row, "field": f, "ratio": v / r, "value": v, "relay": r})
    return res


def med(summary, key, field):
    e = summary.get(key, {}).get(field)
    return e["median"] if e else None


def targets(summary):
    """The goals of issue 6, checked per worker count."""
    res = []
    workers = sorted({k[1] for k in summary if k[2] in STRAITS}, key=str)
    for w in workers:
        for sp in STRAITS:
            res += targets_of(summary, w, sp)
    return res


# strait's two ways in, the bootstrap listeners and a Gateway, for the
# binary measured and the --base one.
STRAITS = ("base", "base-gw", "strait", "strait-gw")


def targets_of(summary, w, sp):
    res = []
    for scen in ("h1", "h2tls"):
        s, h = med(summary, (scen, w, sp), "per_cpu"), med(summary, (scen, w, "haproxy"), "per_cpu")
        if s and h:
            res.append({"target": "%s req/CPU-s >= 1.3x HAProxy" % scen, "workers": w, "proxy": sp,
                        "value": "%.2fx (%s vs %s)" % (s / h, fmt(s), fmt(h)), "met": s >= 1.3 * h})
    s = med(summary, ("tlshs", w, sp), "per_cpu")
    if s:
        res.append({"target": "TLS 1.3 full handshakes >= 5,000 per CPU-s", "workers": w, "proxy": sp,
                    "value": fmt(s), "met": s >= 5000})
    s = med(summary, ("latency", w, sp), "p99_ms")
    others = [med(summary, ("latency", w, p), "p99_ms") for p in ("haproxy", "nginx")]
    others = [o for o in others if o is not None]
    if s is not None and others:
        res.append({"target": "p99 at the fixed rate below HAProxy's and nginx's", "workers": w, "proxy": sp,
                    "value": "%s ms vs %s" % (fmt(s), " / ".join(fmt(o) + " ms" for o in others)),
                    "met": all(s < o for o in others)})
    for scen, limit in (("idle", 300), ("idletls", 5120)):
        s = med(summary, (scen, w, sp), "bytes_per_conn")
        if s is not None:
            res.append({"target": "%s memory <= %d B/connection" % (scen, limit), "workers": w, "proxy": sp,
                        "value": "%s B" % fmt(s), "met": s <= limit})
    return res


def main():
    raw, out = sys.argv[1], sys.argv[2]
    meta = {}
    for kv in sys.argv[3:]:
        k, _, v = kv.partition("=")
        meta[k] = v
    recs = load(raw)
    summary = summarise(recs)
    lines = table(summary)
    tg = targets(summary)
    hb = hbone_ratios(summary)
    print("strait benchmark: median [min-max] of %s run(s) of %s s; xS = ratio to strait (its bootstrap listeners; xR in hbone: to the plain relay), "
          "xD = ratio to the upstream measured directly; '!' = some runs failed"
          % (meta.get("runs", "?"), meta.get("duration_s", "?")))
    print("\n".join(lines))
    if tg:
        print("\n== targets (issue 6)")
        for t in tg:
            print("  %-4s w%s  %-9s %-50s %s" % ("MET" if t["met"] else "no", t["workers"], t["proxy"],
                                                t["target"], t["value"]))
    if hb:
        print("\n== HBONE cost: ratio to the plain TCP relay of the same run (median MiB/CPU-s, MiB/s)")
        names = dict(HBONE_ROWS)
        for t in hb:
            if t["field"] == "mib_cpu":
                s = next((x for x in hb if x["workers"] == t["workers"] and x["row"] == t["row"]
                          and x["field"] == "mib_s"), None)
                print("  w%s  %s: %.2fx of the plain relay's MiB/CPU-s (%s vs %s)%s"
                      % (t["workers"], names[t["row"]], t["ratio"], fmt(t["value"]), fmt(t["relay"]),
                         ", %.2fx of its MiB/s" % s["ratio"] if s else ""))
    failed = [(k, e) for k, e in sorted(summary.items(), key=lambda kv: str(kv[0])) if e["failed"]]
    if failed:
        print("\n== failed runs")
        for k, e in failed:
            print("  %s %s w%s: %d of %d failed %s" % (k[0], k[2], k[1], e["failed"], e["runs"],
                                                       "; ".join(e["why"])[:300]))
    doc = {"meta": meta,
           "summary": [dict(scenario=k[0], workers=k[1], proxy=k[2], **v)
                       for k, v in sorted(summary.items(), key=lambda kv: str(kv[0]))],
           "targets": tg, "hbone": hb, "runs": recs}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
