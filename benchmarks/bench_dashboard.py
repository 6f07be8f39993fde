"""Dashboard benchmark: how fast each view of ``tunedb dashboard`` answers, over HTTP, from the real
running server (a ``tunedb dashboard`` subprocess), for an empty DB and a 1M-record Parquet DB.

For each DB: the server's start-up (until it prints its URL: the first snapshot is computed before),
then per view (overview, pipeline, comparison, trend, an entry page) the time of Dash's page callback
(``POST /_dash-update-component``, what the browser sends on navigation and on every change): the
first answer after start-up (cold: an entry page reads its records then) and ``--repeats`` more
(warm: median, min, max), plus the version poll the page sends every 0.5 s.  On a DB this script
built, it also commits one record and stores one run summary from another process, and measures
until the overview shows the record and the pipeline the run (the live-update latencies at that
size; a DB given with ``--db`` is never written).  Before the server, in this process, it times one
snapshot's record read both ways: the full read (``records(include_stale=False)``, every column:
what the dashboard read before the column projection) and the projected read the dashboard makes
(``data.read_snapshot_records``), each with the aggregation (``data.records_part``) after it.
It measures; it asserts nothing.

    python benchmarks/bench_dashboard.py --json                      # builds an empty and a 1M DB
    python benchmarks/bench_dashboard.py --db /path/to/db --json     # an existing DB (read only)
    python benchmarks/bench_dashboard.py --records 100000 --json     # another size
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

VIEWS = (("overview", "/", ""), ("pipeline", "/pipeline", ""), ("comparison", "/comparison", ""),
         ("trend", "/trend", ""))

COMMIT_ONE = """
import sys, time, tunedb
from tunedb.index import Record
db = tunedb.open(sys.argv[1], create=False)
db.commit(Record({"kind": "gpu", "name": "bench-live"}, {"family": "matmul", "m": 8}, {"i": 1}, [1e-3]))
db.close()
print(time.time(), flush=True)
"""

ADD_RUN = """
import sys, time, tunedb
db = tunedb.open(sys.argv[1], create=False)
db.add_run({"kind": "tune", "label": "bench-run", "target": "bench-live", "evaluations": 1, "cache_hits": 0,
            "measurements": 1, "tasks": []})
print(time.time(), flush=True)
"""


def build(path: Path, n: int) -> float:
    """A Parquet DB of ``n`` generated records at ``path`` (bench_store's RecordBatches); seconds."""
    import tunedb

    t0 = time.perf_counter()
    db = tunedb.open(path)
    if n:
        from bench_store import stream_batches

        for batch in stream_batches(n):
            db.commit(batch)
    db.close()
    return time.perf_counter() - t0


def snapshot_read(db_path: Path, repeats: int = 3) -> dict:
    """Seconds (median of ``repeats``) of one snapshot's record read: full vs projected, and the
    aggregation of the projected table (see the module docstring)."""
    import tunedb
    from tunedb.transfer.apps.dashboard import data

    db = tunedb.open(db_path, create=False)
    try:
        full, projected, part = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            t = db.records(include_stale=False)
            full.append(time.perf_counter() - t0)
            del t
            t0 = time.perf_counter()
            t = data.read_snapshot_records(db)
            projected.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            data.records_part(db, t)
            part.append(time.perf_counter() - t0)
            del t
        return {"full_read_s": round(statistics.median(full), 3), "projected_read_s": round(statistics.median(projected), 3),
                "records_part_s": round(statistics.median(part), 3), "columns": len(data.SNAPSHOT_COLUMNS)}
    finally:
        db.close()


def body(pathname: str, search: str = "", output: str = "page") -> bytes:
    if output == "version":
        d = {"output": "version.data", "outputs": {"id": "version", "property": "data"},
             "inputs": [{"id": "tick", "property": "n_intervals", "value": 1}],
             "state": [{"id": "version", "property": "data", "value": 0}], "changedPropIds": ["tick.n_intervals"]}
    else:
        d = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
             "inputs": [{"id": "url", "property": "pathname", "value": pathname},
                        {"id": "url", "property": "search", "value": search},
                        {"id": "version", "property": "data", "value": 1}],
             "changedPropIds": ["url.pathname"], "state": []}
    return json.dumps(d).encode()


def post(url: str, data: bytes) -> tuple[float, dict]:
    """(seconds, decoded answer) of one callback request."""
    req = urllib.request.Request(url + "_dash-update-component", data=data,
                                 headers={"Content-Type": "application/json", "Origin": url.rstrip("/")})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read()
    return time.perf_counter() - t0, json.loads(raw) if raw else {}


def find_text(node, id_: str) -> str | None:
    """The text of the component ``id_`` in a Dash JSON tree."""
    if isinstance(node, list):
        for n in node:
            t = find_text(n, id_)
            if t is not None:
                return t
        return None
    if not isinstance(node, dict):
        return None
    props = node.get("props", {})
    if props.get("id") == id_:
        c = props.get("children")
        return c if isinstance(c, str) else json.dumps(c)
    return find_text(props.get("children"), id_)


def first_entry_href(tree) -> str | None:
    """The first ``/entry?...`` link of the page."""
    m = re.search(r'"href": "(/entry\?[^"]+)"', json.dumps(tree))
    return m.group(1) if m else None


def measure(db: Path, repeats: int, *, writable: bool) -> dict:
    """Start the dashboard on ``db`` and time every view (see the module docstring)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tunedb", "dashboard", "--db", str(db), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://\S+", line)
        if m is None:
            raise SystemExit(f"the dashboard did not start: {line!r} {proc.stderr.read()[:400]}")
        url = m.group(0)
        out: dict = {"startup_s": round(time.perf_counter() - t0, 3), "views": {}}
        views = list(VIEWS)
        _, first = post(url, body("/"))
        href = first_entry_href(first)
        if href:
            path, _, query = href.partition("?")
            views.append(("entry", path, "?" + query))
        for name, path, search in [*views, ("version poll", "", "")]:
            data = body(path, search, "version" if name == "version poll" else "page")
            cold, _ = post(url, data)
            warm = [post(url, data)[0] for _ in range(repeats)]
            out["views"][name] = {"first_s": round(cold, 4), "median_s": round(statistics.median(warm), 4),
                                  "min_s": round(min(warm), 4), "max_s": round(max(warm), 4), "repeats": repeats}
        if writable:
            _, tree = post(url, body("/"))
            n0 = int(find_text(tree["response"]["page"]["children"], "ov-records"))
            done = subprocess.run([sys.executable, "-c", COMMIT_ONE, str(db)], capture_output=True, text=True,
                                  check=True, cwd=ROOT)
            committed = float(done.stdout.split()[-1])
            while time.time() - committed < 120:
                _, tree = post(url, body("/"))
                if int(find_text(tree["response"]["page"]["children"], "ov-records")) > n0:
                    break
                time.sleep(0.05)
            out["commit_to_view_s"] = round(time.time() - committed, 3)
            done = subprocess.run([sys.executable, "-c", ADD_RUN, str(db)], capture_output=True, text=True,
                                  check=True, cwd=ROOT)
            stored = float(done.stdout.split()[-1])
            while time.time() - stored < 120:
                _, tree = post(url, body("/pipeline"))
                if "bench-run" in (find_text(tree["response"]["page"]["children"], "pl-runs") or ""):
                    break
                time.sleep(0.05)
            out["run_to_view_s"] = round(time.time() - stored, 3)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def table(results: dict) -> str:
    lines = []
    for name, r in results.items():
        lines.append(f"{name}: start-up {r['startup_s']:.2f} s (first snapshot included)"
                     + (f"; a commit shown after {r['commit_to_view_s']:.2f} s, a run summary after "
                        f"{r['run_to_view_s']:.2f} s" if "commit_to_view_s" in r else ""))
        if "snapshot_read" in r:
            sr = r["snapshot_read"]
            lines.append(f"  snapshot read: every column {sr['full_read_s']:.2f} s, the {sr['columns']} columns the "
                         f"views use {sr['projected_read_s']:.2f} s, aggregation {sr['records_part_s']:.2f} s")
        lines.append(f"  {'view':<14}{'first':>10}{'median':>10}{'min':>10}{'max':>10}")
        for v, s in r["views"].items():
            lines.append(f"  {v:<14}{s['first_s'] * 1e3:>8.1f}ms{s['median_s'] * 1e3:>8.1f}ms"
                         f"{s['min_s'] * 1e3:>8.1f}ms{s['max_s'] * 1e3:>8.1f}ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", action="append", default=[], help="measure this existing DB (repeatable; never written)")
    ap.add_argument("--records", type=int, action="append", default=[],
                    help="build a DB of N records (repeatable; default: 0 and 1000000 when no --db)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--work", help="where to build DBs (default: a temp directory, removed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = args.records or ([] if args.db else [0, 1_000_000])
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-dashboard-"))
    results: dict = {}
    try:
        for n in sizes:
            path = work / f"db-{n}"
            if path.exists():
                shutil.rmtree(path)
            built = build(path, n)
            snap = snapshot_read(path)
            r = measure(path, args.repeats, writable=True)
            r["build_s"] = round(built, 1)
            r["snapshot_read"] = snap
            results[f"{n} records"] = r
        for d in args.db:
            results[d] = measure(Path(d), args.repeats, writable=False)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1) if args.json else table(results))
    if args.json:
        print(table(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
