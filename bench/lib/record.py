#!/usr/bin/python3
"""Parse one load generator's output and append one JSON record.

bench/run calls this after every measured run:

    record.py RAW.jsonl TOOL OUTFILE key=value...

TOOL is wrk, h2load, stime or idle; OUTFILE is what the tool printed
(for h2load latency runs, key log=PATH names its --log-file). The
key=value pairs (scenario, proxy, workers, run, cpu_s, wall_s, ...) are
copied into the record; numbers become numbers. The record says ok=false
with a reason when the output shows errors or cannot be read, so the
report can show the run as failed instead of as a fast run.
"""
import json
import re
import sys

UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def num(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_wrk(out, rec):
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+), ([\d.]+)(\w+) read", out)
    if not m:
        raise ValueError("no 'requests in' line")
    secs = float(m.group(2)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(3)]
    rec["count"] = int(m.group(1))
    rec["tool_s"] = secs
    rec["bytes"] = float(m.group(4)) * UNITS[m.group(5)]
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    rec["rate"] = float(m.group(1)) if m else rec["count"] / secs
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        # A read error is how wrk sees a peer that closed; all count.
        errors += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    rec["errors"] = errors


def parse_h2load(out, rec):
    m = re.search(r"finished in ([\d.]+)(\w+), ([\d.]+) req/s", out)
    if not m:
        raise ValueError("no 'finished in' line")
    rec["tool_s"] = float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    rec["rate"] = float(m.group(3))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    if not m:
        raise ValueError("no 'requests:' line")
    total, started, done, ok, failed, errored, timeout = map(int, m.groups())
    rec["count"] = ok
    rec["errors"] = failed + errored + timeout
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        rec["errors"] += int(m.group(3)) + int(m.group(4))
    m = re.search(r"traffic: .*?\((\d+)\) total", out)
    if m:
        rec["bytes"] = int(m.group(1))


def percentile(sorted_vals, p):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def parse_h2load_log(path, rec):
    """h2load --log-file: start (us since epoch), status, duration (us)."""
    lat = []
    bad = 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            if not parts[1].startswith("2"):
                bad += 1
            lat.append(int(parts[2]))
    lat.sort()
    rec["samples"] = len(lat)
    rec["p50_ms"] = percentile(lat, 50) / 1000.0 if lat else None
    rec["p99_ms"] = percentile(lat, 99) / 1000.0 if lat else None
    rec["p999_ms"] = percentile(lat, 99.9) / 1000.0 if lat else None
    rec["max_ms"] = lat[-1] / 1000.0 if lat else None
    rec["errors"] = rec.get("errors", 0) + bad


def parse_stime(out, rec):
    # One or more `openssl s_time` outputs (parallel clients).
    conns = 0
    per_conn = []
    for m in re.finditer(r"(\d+) connections in (\d+) real seconds, (\d+) bytes read per connection", out):
        conns += int(m.group(1))
        per_conn.append(int(m.group(3)))
    if not per_conn:
        raise ValueError("no 's_time' summary line")
    rec["count"] = conns
    rec["bytes_per_conn"] = min(per_conn)
    # A 64-byte body plus a status line and headers is well over 64 bytes;
    # less means the request failed (s_time does not check statuses).
    rec["errors"] = 0 if min(per_conn) >= 64 + 17 else conns
    rec["clients"] = len(per_conn)


def parse_idle(out, rec):
    m = re.search(r"ready (\d+) (\d+)", out)
    if not m:
        raise ValueError("idle client never reported ready: " + out.strip()[-300:])
    rec["conns"] = int(m.group(1))
    rec["errors"] = int(m.group(2))


def main():
    raw, tool, outfile = sys.argv[1:4]
    rec = {"tool": tool}
    for kv in sys.argv[4:]:
        k, _, v = kv.partition("=")
        rec[k] = num(v)
    try:
        with open(outfile, errors="replace") as f:
            out = f.read()
        {"wrk": parse_wrk, "h2load": parse_h2load, "stime": parse_stime,
         "idle": parse_idle}[tool](out, rec)
        if "log" in rec:
            parse_h2load_log(rec.pop("log"), rec)
        if tool == "idle":
            before, after = rec["rss_before_kb"], rec["rss_after_kb"]
            rec["bytes_per_conn"] = (after - before) * 1024.0 / max(1, rec["conns"])
        else:
            cpu = rec.get("cpu_s", 0)
            rec["per_cpu"] = rec["count"] / cpu if cpu > 0 else None
            if "bytes" in rec:
                secs = rec.get("tool_s") or rec.get("wall_s")
                rec["mib_s"] = rec["bytes"] / 1048576.0 / secs if secs else None
                rec["mib_cpu"] = rec["bytes"] / 1048576.0 / cpu if cpu > 0 else None
        rec["ok"] = rec.get("errors", 0) == 0 and rec.get("count", rec.get("conns", 0)) > 0
        if not rec["ok"]:
            rec["why"] = "errors=%s in %s" % (rec.get("errors"), outfile)
    except (OSError, ValueError, KeyError, TypeError) as e:
        rec["ok"] = False
        rec["why"] = "%s: %s" % (outfile, e)
    with open(raw, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
    if not rec["ok"]:
        print("bench: run failed: %s %s %s w%s: %s" % (
            rec.get("scenario"), rec.get("proxy"), tool, rec.get("workers"), rec["why"]),
            file=sys.stderr)


if __name__ == "__main__":
    main()
