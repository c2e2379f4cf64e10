#!/usr/bin/env python3
"""Where a pod replacement's time goes, from the API server's audit log.

    APISERVER_AUDIT=1 make bench BENCH="replace --runs 20"
    hack/audit-replacements.py target/bench/audit.log

For every pod DELETE that completed, the next successful create of a pod of the same name
and namespace is its replacement. Per creator (the operator, the StatefulSet controller):
  react  = create received by the API server - delete completed
           (the watch event's trip to the controller, its own work, the request's trip back)
  create = create completed - create received (the API server's own work on the create)
and the creates that found the pod already there (409: a second path of the same creator
lost the race). Figures in milliseconds.
"""
import json
import sys
from datetime import datetime


def ts(s):
    # 2026-11-24T20:12:43.830135Z; fromisoformat takes microseconds with a Z from 3.11 on.
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(path):
    events = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("stage") != "ResponseComplete" or not e.get("objectRef"):
                continue
            ref = e["objectRef"]
            if ref.get("resource") != "pods" or ref.get("subresource"):
                continue
            events.append(e)
    events.sort(key=lambda e: ts(e["stageTimestamp"]))
    deletes = {}  # (ns, name) -> [delete completed, replaced yet]
    rows = {}  # creator -> {"react": [], "create": [], "conflict": 0}
    for e in events:
        ref = e["objectRef"]
        key = (ref.get("namespace"), ref.get("name"))
        code = e.get("responseStatus", {}).get("code")
        if e["verb"] == "delete" and code == 200:
            deletes[key] = [ts(e["stageTimestamp"]), False]
        elif e["verb"] == "create" and key in deletes:
            who = e["user"]["username"]
            row = rows.setdefault(who, {"react": [], "create": [], "conflict": 0})
            deleted, replaced = deletes[key]
            if code == 409:
                row["conflict"] += 1
            elif code == 201 and not replaced:
                deletes[key][1] = True
                received = ts(e["requestReceivedTimestamp"])
                row["react"].append((received - deleted) * 1000)
                row["create"].append((ts(e["stageTimestamp"]) - received) * 1000)
    if not rows:
        sys.exit(f"no pod replaced in {path}: was it written with APISERVER_AUDIT=1?")
    for who, row in sorted(rows.items()):
        print(who)
        for part in ("react", "create"):
            xs = row[part]
            if xs:
                print(
                    f"  {part:6} n={len(xs)} p50={pct(xs, 50):.1f} p99={pct(xs, 99):.1f} "
                    f"min={min(xs):.1f} max={max(xs):.1f} ms"
                )
        print(f"  creates that found the pod already there (409): {row['conflict']}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
