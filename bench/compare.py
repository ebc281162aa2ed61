#!/usr/bin/python3
"""Markdown table of the headline figures of one or more bench/run results.

    compare.py [--spread] [LABEL=]RESULT.json [[LABEL=]RESULT.json...]

For each file, each worker count and the scenarios h1 and h2tls
(requests per proxy CPU-second, median of the runs) and idle and idletls
(RSS growth per connection), one row: strait (bootstrap listeners),
strait-gw (Gateway + VirtualService + ServiceEntry), HAProxy and nginx,
then the ratios gw/boot, boot/HAProxy, gw/HAProxy, boot/nginx, gw/nginx.
When a file has the rows of a --base binary (base, base-gw), they come
first, with the ratios boot/base (strait over base) and gw/base-gw.
For req/CPU-s a ratio above 1 means the first is ahead; for B/conn, that
it uses more memory. LABEL names the file's rows (default: the file
name). --spread adds each figure's [min-max] over the file's runs.
Standard library only.
"""
import json
import os
import sys

ROWS = [("h1", "per_cpu", "h1 req/CPU-s"), ("h2tls", "per_cpu", "h2tls req/CPU-s"),
        ("idle", "bytes_per_conn", "idle B/conn"), ("idletls", "bytes_per_conn", "idletls B/conn")]
PROXIES = ["strait", "strait-gw", "haproxy", "nginx"]
RATIOS = [("strait-gw", "strait", "gw/boot"), ("strait", "haproxy", "boot/HAP"),
          ("strait-gw", "haproxy", "gw/HAP"), ("strait", "nginx", "boot/ngx"),
          ("strait-gw", "nginx", "gw/ngx")]
BASE = ["base", "base-gw"]
BASE_RATIOS = [("strait", "base", "boot/base"), ("strait-gw", "base-gw", "gw/base-gw")]


def fmt(v):
    return "-" if v is None else "{:,.0f}".format(v)


def cell(stat, spread):
    if stat is None:
        return "-"
    if spread and stat["n"] > 1:
        return "%s [%s-%s]" % (fmt(stat["median"]), fmt(stat["min"]), fmt(stat["max"]))
    return fmt(stat["median"])


def main():
    args = sys.argv[1:]
    spread = "--spread" in args
    args = [a for a in args if a != "--spread"]
    docs = []
    for arg in args:
        name, _, path = arg.rpartition("=")
        if not name:
            name = os.path.basename(path).rsplit(".", 1)[0]
        with open(path) as f:
            docs.append((name, json.load(f)))
    proxies, ratios = PROXIES, RATIOS
    if any(e["proxy"].startswith("base") for _, d in docs for e in d["summary"]):
        proxies = BASE + PROXIES
        ratios = BASE_RATIOS + RATIOS
    head = ["run", "scenario", "w"] + proxies + [r[2] for r in ratios]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for name, doc in docs:
        med = {}
        for e in doc["summary"]:
            for _, field, _ in ROWS:
                if isinstance(e.get(field), dict):
                    med[(e["scenario"], e["workers"], e["proxy"], field)] = e[field]
        workers = sorted({k[1] for k in med if k[2] != "direct"}, key=str)
        for scen, field, label in ROWS:
            for w in workers:
                stats = {p: med.get((scen, w, p, field)) for p in proxies}
                if all(v is None for v in stats.values()):
                    continue
                vals = {p: v and v["median"] for p, v in stats.items()}
                cells = [name, label, str(w)] + [cell(stats[p], spread) for p in proxies]
                for a, b, _ in ratios:
                    cells.append("%.2f" % (vals[a] / vals[b]) if vals[a] and vals[b] else "-")
                print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
