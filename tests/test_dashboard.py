"""``tunedb dashboard``, server side: every view over HTTP (Dash's callback endpoint, through Flask's
test client and through the real ``tunedb dashboard`` process) on a real Parquet DB holding imported
Kernel Tuner records and replayed warm/cold tuning runs; read-only; the CLI's address rules."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dash")

import tunedb  # noqa: E402
from tunedb.datasets import convolution_files  # noqa: E402
from tunedb.index import Record  # noqa: E402
from tunedb.transfer.apps import figures  # noqa: E402
from tunedb.transfer.apps.dashboard.app import create_app  # noqa: E402
from tunedb.transfer.apps.dashboard.data import DashboardData  # noqa: E402
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData  # noqa: E402
from tunedb.transfer.search import runlog  # noqa: E402
from tunedb.transfer.search.tuner import TuneOptions, Tuner  # noqa: E402

from helpers import ROOT, run_cli  # noqa: E402

STALE = {"kind": "gpu", "name": "old-gpu", "vendor": "nv"}
WORKLOAD = {"family": "matmul", "m": 64, "n": 64, "k": 64}


def make_db(path: Path, imported: int = 300) -> dict:
    """A Parquet DB at ``path``: ``imported`` A100 Kernel Tuner records, a warm and a cold replayed
    tune of the A4000 (stored run summaries, as ``tunedb tune`` stores them), a failed measurement
    and an invalidated target.  Returns what the views should show."""
    db = tunedb.open(path)
    files = convolution_files()
    a100 = ReplayData(files["A100"])
    db.commit(list(a100.results.values())[:imported])
    data = ReplayData(files["A4000"])
    results = {}
    for cold in (False, True):
        watch, before = runlog.Stopwatch(), runlog.records_in(db)
        res = Tuner(db, data.target, data.workload, data.space, KernelTunerReplayBackend(data),
                    TuneOptions(budget=12, seed=0, cold=cold, patience=10_000)).run()
        runlog.save_tuner_runs(db, "tune", data.target, [res], watch, before, cold=cold)
        results["cold" if cold else "warm"] = res
    db.commit([Record(STALE, WORKLOAD, {"tile": t}, [1e-3 * (t + 1)]) for t in range(3)])
    db.invalidate(STALE)
    db.commit(Record(data.target, data.workload, {"broken": 1}, [], status="compile_error", error="boom"))
    db.close()
    return {"a100": a100, "a4000": data, "results": results}


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("dash") / "db"
    return path, make_db(path)


# ------------------------------------------------------------------ Dash responses
def callback_body(pathname: str, search: str = "", version: int = 1) -> dict:
    """The request Dash's renderer sends for the page callback."""
    return {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": pathname},
                       {"id": "url", "property": "search", "value": search},
                       {"id": "version", "property": "data", "value": version}],
            "changedPropIds": ["url.pathname"], "state": []}


def find(node: Any, id_: str) -> Any:
    """The component with ``id`` in a Dash JSON tree, or None."""
    if isinstance(node, list):
        for n in node:
            found = find(n, id_)
            if found is not None:
                return found
        return None
    if not isinstance(node, dict):
        return None
    props = node.get("props", {})
    if props.get("id") == id_:
        return node
    return find(props.get("children"), id_)


def text(node: Any) -> str:
    """All text below a component, cells separated by ``|``."""
    if node is None:
        return ""
    if isinstance(node, (str, int, float)):
        return str(node)
    if isinstance(node, list):
        return "|".join(text(n) for n in node)
    props = node.get("props", {}) if isinstance(node, dict) else {}
    return text(props.get("children"))


def rows(node: Any) -> list[list[str]]:
    """The body rows of a table component as lists of cell texts."""
    body = [c for c in node["props"]["children"] if c["type"] == "Tbody"][0]
    return [[text(td) for td in tr["props"]["children"]] for tr in body["props"]["children"] or []]


def page(client: Any, pathname: str, search: str = "") -> list:
    r = client.post("/_dash-update-component", json=callback_body(pathname, search))
    assert r.status_code == 200, r.data[:300]
    return r.get_json()["response"]["page"]["children"]


def tree_state(path: Path) -> dict:
    """Every file under ``path``: (size, mtime_ns)."""
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            st = os.stat(os.path.join(d, n))
            out[os.path.relpath(os.path.join(d, n), path)] = (st.st_size, st.st_mtime_ns)
    return out


# ---------------------------------------------------------------------------- views
def test_every_view_shows_the_db_numbers_and_never_writes(filled):
    path, made = filled
    before = tree_state(path)
    db = tunedb.open(path, create=False)
    data = DashboardData(db)
    client = create_app(data).server.test_client()
    warm, cold = made["results"]["warm"], made["results"]["cold"]
    live = db.records(include_stale=False).num_rows  # (a read of the records: writes nothing)
    assert live > 300

    ov = page(client, "/")
    assert find(ov, "view-overview") is not None
    assert text(find(ov, "ov-records")) == str(live)
    assert text(find(ov, "ov-targets")) == "2"  # A100, A4000 (the invalidated one has no live record)
    assert text(find(ov, "ov-stale")) == "old-gpu"
    assert text(find(ov, "ov-failed")) == "1"
    assert text(find(ov, "ov-runs")) == "2"
    evals = warm.evaluations + cold.evaluations
    hits = warm.cache_hits + cold.cache_hits
    assert text(find(ov, "ov-hit-all")).endswith(f"({hits}/{evals})")
    assert "no evaluations" in text(find(ov, "ov-hit-session"))  # both runs were stored before it started
    biggest = rows(find(ov, "ov-entries-table"))
    assert biggest[0][0] == "NVIDIA A100-PCIE-40GB" and biggest[0][2] == "300"

    pl = page(client, "/pipeline")
    runs = rows(find(pl, "pl-runs"))
    assert [r[1] for r in runs] == ["tune cold NVIDIA RTX A4000", "tune warm NVIDIA RTX A4000"]
    warm_row, cold_row = runs[1], runs[0]
    assert warm_row[2] == str(warm.evaluations) and warm_row[3] == str(warm.cache_hits)
    # where the evaluations came from: the runs' origin counts (seeded / model / random / default)
    assert warm.origins["seed"] >= 1
    assert warm_row[4] == f"{warm.origins['seed']} (1 task(s)) from NVIDIA A100-PCIE-40GB"
    for row, res in ((warm_row, warm), (cold_row, cold)):
        assert row[5:8] == [str(res.origins.get(o, 0)) for o in ("model", "random", "default")]
        assert row[8] == str(res.measurements)
    assert cold_row[4] == "0 (0 task(s))" and int(cold_row[6]) >= 3
    # the failed record was committed after both runs ended: neither run counts it
    assert warm_row[9] == "0" and cold_row[9] == "0"
    assert find(pl, "g-time-split") is not None and find(pl, "g-hit-rate") is not None

    cmp_ = page(client, "/comparison")
    graph = find(cmp_, "g-warm-cold")
    names = sorted(t["name"] for t in graph["props"]["figure"]["data"])
    assert names == ["cold (NVIDIA RTX A4000)", "warm (NVIDIA RTX A4000)"]
    reach = {r[1]: r for r in rows(find(cmp_, "cmp-reach"))}
    best = min(warm.best_cost, cold.best_cost)
    for label, res in (("warm", warm), ("cold", cold)):
        want = figures.evaluations_to_reach(res.history, best / figures.BEST_FRACTION)
        assert reach[label][5] == ("never" if want is None else str(want))

    tr = page(client, "/trend")
    for gid in ("g-best-time", "g-records-time"):
        assert find(tr, gid)["props"]["figure"]["data"], gid
    assert find(tr, "g-gain") is not None and "no fit of G(n)" in text(find(tr, "tr-fit"))

    # the per-entry page of the A4000: the k best configs, ascending, one per config, with provenance
    a4000 = made["a4000"]
    from tunedb.index.keys import key_of

    tk, wk = key_of(a4000.target), key_of(a4000.workload)
    en = page(client, "/entry", f"?t={tk}&w={wk}")
    best_rows = rows(find(en, "en-best"))
    configs = [json.loads(r[1]) for r in best_rows]
    assert 1 <= len(configs) <= 10
    ok = [r for r in db.records(tk, wk).to_pylist() if r["status"] == "ok"]
    by_cfg: dict[str, float] = {}
    for r in ok:
        by_cfg[r["config"]] = min(by_cfg.get(r["config"], 1e9), r["cost"])
    want = sorted(by_cfg, key=lambda c: by_cfg[c])[:10]
    assert [json.dumps(c, sort_keys=True, separators=(",", ":")) for c in configs] == want
    assert all(r[7] == "replayed measurement" for r in best_rows)
    # which nearest entry seeded each of the best configs (its record's meta.seeded_from)
    meta = {json.dumps(json.loads(r["config"]), sort_keys=True, separators=(",", ":")): json.loads(r["meta"])
            for r in ok}
    for cfg, row in zip(configs, best_rows):
        m = meta[json.dumps(cfg, sort_keys=True, separators=(",", ":"))]
        if "seeded_from" in m:
            assert row[8].startswith("seed from NVIDIA A100-PCIE-40GB (workload ")
            assert m["seeded_from"]["workload_key"][:12] in row[8] and "similarity 0." in row[8]
        else:
            assert row[8] in ("–", m.get("origin"))
    assert any(row[8].startswith("seed from ") for row in best_rows)
    best_cfg = json.dumps(warm.best_config, sort_keys=True, separators=(",", ":")) if warm.best_cost <= \
        cold.best_cost else json.dumps(cold.best_config, sort_keys=True, separators=(",", ":"))
    top = best_rows[[json.dumps(c, sort_keys=True, separators=(",", ":")) for c in configs].index(best_cfg)]
    assert "best of a" in top[9] and "tune run" in top[9]
    if warm.best_cost <= cold.best_cost:
        assert "seeded from NVIDIA A100-PCIE-40GB" in top[9]
    assert re.fullmatch(r"\d+", best_rows[0][3]) and "%" in best_rows[0][5]
    en_runs = rows(find(en, "en-runs"))
    assert {r[1] for r in en_runs} == {"tune warm", "tune cold"}
    # the imported entry says where its configs came from
    a100 = made["a100"]
    en2 = page(client, "/entry", f"?t={key_of(a100.target)}&w={key_of(a100.workload)}")
    assert rows(find(en2, "en-best"))[0][7] == "imported (kernel-tuner)"
    # a key that is not stored, or not a key at all, is a page saying so (no exception)
    assert "no live record" in text(find(page(client, "/entry", "?t=" + "0" * 32 + "&w=" + "1" * 32), "view-entry"))
    assert find(page(client, "/entry", "?t=<script>&w=x"), "view-entry") is not None
    assert find(page(client, "/nowhere"), "view-missing") is not None

    for _ in range(3):
        data.poll()
    assert data.poll() is False, "nothing changed: no new snapshot"
    db.close()
    assert tree_state(path) == before, "the dashboard wrote to the database directory"


def test_a_summary_without_origins_says_not_recorded_and_the_entry_page_shows_origins(filled, tmp_path):
    from tunedb.transfer.apps.dashboard import views

    src = tunedb.open(filled[0], create=False)
    warm = next(r for r in src.runs("tune") if r["label"] == "warm")
    old = {k: v for k, v in warm.items() if k not in ("origins", "origin_split", "run_id", "stored")}
    old["tasks"] = [{k: v for k, v in t.items() if k not in ("origins", "origin_split")} for t in warm["tasks"]]
    db = tunedb.open(tmp_path / "db")
    db.add_run(old)   # a summary stored before origins were recorded
    db.add_run({k: v for k, v in warm.items() if k not in ("run_id", "stored")})
    client = create_app(DashboardData(db)).server.test_client()
    new_row, old_row = rows(find(page(client, "/pipeline"), "pl-runs"))
    assert old_row[4] == "1 task(s) from NVIDIA A100-PCIE-40GB" and old_row[5:8] == ["not recorded"] * 3
    assert old_row[8] == str(warm["measurements"])
    assert new_row[4].startswith(f"{warm['origins']['seed']} (1 task(s))") and new_row[5] != "not recorded"
    # an entry page whose best configs name their origin (the page's origin / seeded_from keys)
    b = {"config": "{}", "cost": 1e-3, "repeats": 1, "min": 1e-3, "max": 1e-3, "rel_std": None, "measurements": 1,
         "provenance": "replayed measurement", "meta": "run_id=abc", "runs": "–"}
    sf = {"target_name": "GPU A", "target_key": "a" * 32, "workload_key": "b" * 32, "similarity": 0.987654}
    pg = {"target_name": "t", "workload": "w", "records": 2, "ok_records": 2, "failed": 0, "configs": 2, "runs": [],
          "best": [{**b, "origin": "seed", "seeded_from": sf}, {**b, "origin": "model", "meta": ""}],
          "curve": figures.FigureSpec("entry_curve", "x", empty="no ok record")}
    from plotly.utils import PlotlyJSONEncoder

    tree = json.loads(json.dumps(views.entry(pg, "t", "w"), cls=PlotlyJSONEncoder))
    got = rows(find(tree, "en-best"))
    assert got[0][7] == "replayed measurement (run_id=abc)"
    assert got[0][8] == "seed from GPU A (workload bbbbbbbbbbbb, similarity 0.988)" and got[1][8] == "model"
    # ... or, from the meta text alone, seeded_from parsed back from it
    text_only = {**b, "meta": f"seeded_from={sf}, run_id=abc"}
    assert views.best_origin(text_only) == ("seed", sf, "run_id=abc")


def test_empty_db_renders_every_view(tmp_path):
    path = tmp_path / "empty"
    tunedb.open(path).close()
    client = create_app(DashboardData(tunedb.open(path, create=False))).server.test_client()
    ov = page(client, "/")
    assert text(find(ov, "ov-records")) == "0" and text(find(ov, "ov-stale")) == "none"
    assert "no tuning run is stored yet" in text(find(page(client, "/pipeline"), "pl-runs"))
    assert "Nothing to draw" in text(find(page(client, "/comparison"), "fig-warm_vs_cold"))
    tr = page(client, "/trend")
    assert "Nothing to draw" in text(find(tr, "fig-records_over_time"))


def test_the_report_and_the_dashboard_draw_the_same_figure(filled, tmp_path):
    from tunedb.transfer.apps.report import RunsData, add_summaries

    db = tunedb.open(filled[0], create=False)
    runs = RunsData()
    add_summaries(runs, db.runs(), "database")
    spec = figures.warm_vs_cold_figure(runs.runs)
    assert figures.to_matplotlib(spec, tmp_path / "w.png")
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"
    fig = figures.to_plotly(spec)
    assert [t.name for t in fig.data] == [s.name for p in spec.panels for s in p.series]
    assert list(fig.data[0].y) == spec.panels[0].series[0].y


# ---------------------------------------------------------------------- the real server
def start_dashboard(db: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``tunedb dashboard --db DB --port 0`` in a real subprocess; (process, URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "tunedb", "dashboard", "--db", str(db), "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    m = re.search(r"http://\S+", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"no URL: {line!r} {proc.stderr.read()[:500]}")
    return proc, m.group(0)


def post_page(url: str, pathname: str, search: str = "") -> list:
    req = urllib.request.Request(url + "_dash-update-component", data=json.dumps(callback_body(pathname, search)).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["response"]["page"]["children"]


COMMIT_ONE = """
import sys, time, tunedb
from tunedb.index import Record
db = tunedb.open(sys.argv[1], create=False)
db.commit(Record({"kind": "gpu", "name": "live-gpu"}, {"family": "matmul", "m": 8}, {"i": int(sys.argv[2])}, [1e-3]))
print(time.time(), flush=True)
"""


def test_real_server_shows_another_process_commit(filled, tmp_path):
    proc, url = start_dashboard(filled[0])
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            index = r.read().decode()
        assert "tunedb dashboard" in index and not re.search(r"<script[^>]+src=\"https?://", index)
        n0 = int(text(find(post_page(url, "/"), "ov-records")))
        latencies = []
        for i in range(2):
            out = subprocess.run([sys.executable, "-c", COMMIT_ONE, str(filled[0]), str(i)], capture_output=True,
                                 text=True, timeout=60, check=True)
            committed = float(out.stdout.split()[-1])
            while time.time() - committed < 10:
                if int(text(find(post_page(url, "/"), "ov-records"))) == n0 + i + 1:
                    break
                time.sleep(0.05)
            latencies.append(time.time() - committed)
        print(f"dashboard latency after a commit by another process: {[round(x, 2) for x in latencies]} s")
        assert max(latencies) < 10, latencies
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ----------------------------------------------------------------------------- the CLI
def test_remote_address_needs_the_flag_and_warns(filled):
    p = run_cli("dashboard", "--db", str(filled[0]), "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--allow-remote" in lines[0]
    proc, url = start_dashboard(filled[0], "--host", "0.0.0.0", "--allow-remote")
    try:
        assert url.startswith("http://0.0.0.0:")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    err = proc.stderr.read()
    assert "warning" in err and "0.0.0.0" in err


@pytest.mark.parametrize("where", ["missing", "not-a-db"])
def test_a_missing_db_is_one_line_exit_2(tmp_path, where):
    loc = tmp_path / where
    if where == "not-a-db":
        loc.mkdir()
        (loc / "x.txt").write_text("x")
    p = run_cli("dashboard", "--db", str(loc), "--port", "0", timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and str(loc) in p.stderr
    assert where != "missing" or not loc.exists(), "the dashboard created a database"


def test_without_dash_the_command_says_what_to_install(filled, tmp_path):
    """Where dash is not installed (here: hidden by a sitecustomize that blocks its import)."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['dash'] = None\n")
    p = run_cli("dashboard", "--db", str(filled[0]), "--port", "0", timeout=60,
                env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == ["tunedb: error: the dashboard needs dash and plotly: "
                                             "pip install 'tunedb[dashboard]'"]


SAME = ("records", "targets", "workloads", "entries", "entries_with_ok", "failed_records", "stale_targets",
        "hits_all", "evaluations_all", "runs", "sources")


def _copy(src, dst) -> None:
    """The records, the invalidation and the run summaries of ``src`` into ``dst``."""
    dst.commit(list(src.iter_records()))
    dst.invalidate(STALE)
    for r in src.runs():
        dst.add_run(r)


@pytest.mark.parametrize("backend", ["memory", "postgres"])
def test_other_backends_show_the_same_numbers(filled, backend, request):
    src = tunedb.open(filled[0], create=False)
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        dst = tunedb.open(url)
    else:
        url, dst = None, tunedb.open("memory:dash")
    _copy(src, dst)
    want, got = DashboardData(src).snapshot, DashboardData(dst).snapshot
    assert {k: got.overview[k] for k in SAME} == {k: want.overview[k] for k in SAME}
    cols = ("name", "evaluations", "lookup", "seeded_tasks", "seed_sources", "measured", "measure_s", "query_s")
    assert [[p[c] for c in cols] for p in got.pipeline] == [[p[c] for c in cols] for p in want.pipeline]
    assert got.reach == want.reach
    if url is not None:  # another process commits to the server: the next poll shows it
        data = DashboardData(dst)
        n0 = data.snapshot.overview["records"]
        subprocess.run([sys.executable, "-c", COMMIT_ONE, url, "7"], check=True, timeout=60, capture_output=True)
        assert data.poll() is True and data.snapshot.overview["records"] == n0 + 1


def test_a_port_in_use_is_one_line_exit_2(filled):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = run_cli("dashboard", "--db", str(filled[0]), "--port", str(port), timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [f"tunedb: error: cannot serve on 127.0.0.1:{port}: Address already in use"]


COMMIT_AND_DIE = """
import os, signal, sys, tunedb
from tunedb.index import Record
db = tunedb.open(sys.argv[1], create=False)
db.commit(Record({"kind": "gpu", "name": "killed-gpu"}, {"family": "matmul", "m": 8}, {"i": 1}, [1e-3]))
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # its journal stays unfolded: a crashed writer's
"""


def test_a_crashed_writers_journal_is_read_in_place_not_folded(tmp_path):
    """Read-only means read-only even after a crash: the dashboard shows a SIGKILLed writer's
    acknowledged record without folding its journal (which any writable open would do)."""
    from tunedb.index.parquet.store import TuningDB

    path = tmp_path / "db"
    TuningDB.open(path).close()
    p = subprocess.run([sys.executable, "-c", COMMIT_AND_DIE, str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL and "committed" in p.stdout, p.stderr
    before = tree_state(path)
    assert any(k.startswith("journal") for k in before), before
    proc, url = start_dashboard(path)
    try:
        assert int(text(find(post_page(url, "/"), "ov-records"))) == 1  # the acknowledged record is shown
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert tree_state(path) == before  # nothing folded, removed or added
    ro = TuningDB.open(path, read_only=True)
    assert len(ro.records()) == 1
    with pytest.raises(ValueError, match="read-only"):
        ro.commit(Record({"kind": "gpu", "name": "x"}, {"family": "matmul", "m": 8}, {"i": 2}, [1e-3]))
    TuningDB.open(path).close()  # a writable open finishes what the crash left
    assert tree_state(path) != before


def _schema_tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                           "ORDER BY tablename").fetchall()]


def test_postgres_is_served_read_only_by_the_server_itself(filled, postgres_url):
    """On PostgreSQL the dashboard's handle migrates nothing and its sessions are read-only, so the
    server refuses any write; an empty database is one line, exit 2, and stays empty."""
    from tunedb.index.postgres.store import PostgresStore

    p = run_cli("dashboard", "--db", postgres_url, "--port", "0", timeout=60)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "no tunedb schema" in p.stderr and _schema_tables(postgres_url) == []  # nothing was created
    with pytest.raises(ValueError, match="no tunedb database"):
        PostgresStore(postgres_url, read_only=True)

    src = tunedb.open(filled[0], create=False)
    rw = tunedb.open(postgres_url)
    _copy(src, rw)
    token = rw.change_token()
    ro = PostgresStore(postgres_url, read_only=True)
    assert ro.records().num_rows == rw.records().num_rows and len(ro.runs()) == len(rw.runs())
    rec = Record({"kind": "gpu", "name": "x"}, {"family": "matmul", "m": 8}, {"i": 1}, [1e-3])
    for write in (lambda: ro.commit(rec), lambda: ro.invalidate(STALE), lambda: ro.add_run({"kind": "x"}),
                  lambda: ro.mark({}), ro.dedup, ro.compact):
        with pytest.raises(ValueError, match="read-only"):
            write()
    import psycopg

    with ro._db() as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("UPDATE tunedb_changes SET n = n + 1")  # the server itself says no
    proc, url = start_dashboard(postgres_url)
    try:
        a4000 = tunedb.open(filled[0], create=False).records(include_stale=False).to_pylist()
        some = next(r for r in a4000 if r["target_name"] == "NVIDIA RTX A4000")
        for view, search in (("/", ""), ("/pipeline", ""), ("/comparison", ""), ("/trend", ""),
                             ("/entry", f"?t={some['target_key']}&w={some['workload_key']}")):
            assert post_page(url, view, search), view
        assert int(text(find(post_page(url, "/"), "ov-records"))) == rw.records(include_stale=False).num_rows
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert rw.change_token() == token  # nothing was written while every view was served
    rw.close()
    ro.close()


def test_layers_are_served_read_only(filled, tmp_path):
    """``--db A --also B``: both layers open read-only: the top layer's crashed writer's journal
    is read in place, not folded (a writable open of the top layer would fold it)."""
    from tunedb.index.parquet.store import TuningDB

    top = tmp_path / "top"
    TuningDB.open(top).close()
    p = subprocess.run([sys.executable, "-c", COMMIT_AND_DIE, str(top)], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert any(k.startswith("journal") for k in tree_state(top))
    before = (tree_state(top), tree_state(filled[0]))
    proc = subprocess.Popen([sys.executable, "-m", "tunedb", "dashboard", "--db", str(top), "--also", str(filled[0]),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        m = re.search(r"http://\S+", proc.stdout.readline())
        assert m is not None, proc.stderr.read()[:500]
        lower = tunedb.open(filled[0], create=False).records(include_stale=False).num_rows
        assert int(text(find(post_page(m.group(0), "/"), "ov-records"))) == lower + 1
        for view in ("/pipeline", "/comparison", "/trend"):
            assert post_page(m.group(0), view), view
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert (tree_state(top), tree_state(filled[0])) == before
