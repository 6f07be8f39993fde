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
from tunedb.transfer.apps.entries import cost_brief  # noqa: E402
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
    from tunedb.index.model.keys import key_of

    tk, wk = key_of(a4000.target), key_of(a4000.workload)
    en = page(client, "/entry", f"?t={tk}&w={wk}")
    best_rows = rows(find(en, "en-best"))
    configs = [json.loads(r[1]) for r in best_rows]
    assert 1 <= len(configs) <= 10
    ok = [r for r in db.records(tk, wk).to_pylist() if r["status"] == "ok"]
    # the configs and costs are the estimator's, as `tunedb best` gives them (db.best_costs), never a min
    want = db.best_costs(a4000.target, a4000.workload, 10)
    assert [json.dumps(c, sort_keys=True, separators=(",", ":")) for c in configs] == \
        [json.dumps(c.config, sort_keys=True, separators=(",", ":")) for c in want]
    assert [r[2] for r in best_rows] == [cost_brief(c.estimate) for c in want]
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


def test_the_runs_table_shows_eta_as_stats_does(tmp_path):
    """eta, the share of a run's tasks the DB answered (``rundata.task_share``: a hit, or a
    search whose every evaluation the DB answered), is each run's last cell of the runs table;
    the line above it is ``rundata.eta_totals`` over the model and warm-start runs, the same
    text ``tunedb stats`` prints for the same DB (a real process)."""
    from tunedb.transfer.apps.rundata import eta_text, eta_totals, task_share

    tasks = [{"workload": {"family": "matmul", "m": 8}, "source": "hit", "evaluations": 0},  # reused whole
             {"workload": {"family": "matmul", "m": 16}, "source": "warm", "evaluations": 4, "cache_hits": 4,
              "measurements": 0},                                                            # every eval answered
             {"workload": {"family": "matmul", "m": 32}, "source": "warm", "evaluations": 4, "cache_hits": 1,
              "measurements": 3}]                                                            # measured
    model = {"kind": "tune-model", "label": "m1", "model": "mlp", "target": "cpu-a", "tasks": tasks,
             "evaluations": 8, "cache_hits": 5, "measurements": 3, "started": "2026-01-01T00:00:00Z",
             "wall_s": 2.0, "t_full_s": 4.0, "query_s": 0.5, "t_total_s": 2.5}
    tune = {"kind": "tune", "label": "cold", "target": "cpu-a", "evaluations": 4, "cache_hits": 0, "measurements": 4,
            "tasks": [{"workload": {"family": "matmul", "m": 64}, "source": "cold", "evaluations": 4,
                       "cache_hits": 0, "measurements": 4}], "started": "2026-01-02T00:00:00Z", "wall_s": 1.0}
    path = tmp_path / "db"
    db = tunedb.open(path)
    db.add_run(model)
    db.add_run(tune)
    stored = db.runs()
    client = create_app(DashboardData(db)).server.test_client()
    pl = page(client, "/pipeline")
    by_name = {r[1]: r for r in rows(find(pl, "pl-runs"))}
    assert task_share(model) == (2, 3)
    assert by_name["tune-model m1 mlp"][-1] == "2/3 tasks = 66.7 %" == eta_text(*task_share(model))
    assert by_name["tune cold cpu-a"][-1] == "0/1 tasks = 0.0 %"
    totals = eta_totals(stored)  # the tune run is no model or warm-start run: not in the sum
    assert (totals["answered"], totals["tasks"], totals["runs"]) == (2, 3, 1)
    line = text(find(pl, "pl-eta"))
    assert line == "eta (tasks answered by the DB, model and warm-start runs: 1): 2/3 tasks = 66.7 %"
    db.close()
    out = run_cli("stats", "--db", str(path))
    assert out.returncode == 0, out.stderr
    assert "2/3 tasks = 66.7 % (model and warm-start runs: 1)" in out.stdout, out.stdout


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
    from tunedb.transfer.apps.rundata import RunsData, add_summaries

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
                                 headers={"Content-Type": "application/json", "Origin": url.rstrip("/")})
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
    from tunedb.index.parquet.store import ParquetStore

    path = tmp_path / "db"
    ParquetStore.open(path).close()
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
    ro = ParquetStore.open(path, read_only=True)
    assert len(ro.records()) == 1
    with pytest.raises(ValueError, match="read-only"):
        ro.commit(Record({"kind": "gpu", "name": "x"}, {"family": "matmul", "m": 8}, {"i": 2}, [1e-3]))
    ParquetStore.open(path).close()  # a writable open finishes what the crash left
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
    from tunedb.index.parquet.store import ParquetStore

    top = tmp_path / "top"
    ParquetStore.open(top).close()
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


# ------------------------------------------------- one cost estimate, runs counted once, G(n), comparison
EST_T = {"kind": "gpu", "name": "est-gpu", "vendor": "nv"}
EST_W = {"family": "matmul", "m": 32, "n": 32, "k": 32}
EST_CFG = {"tile": 4}


def _history(costs: list[float]) -> list[list]:
    out, best = [], None
    for i, c in enumerate(costs, 1):
        best = c if best is None or c < best else best
        out.append([i, best])
    return out


def _task(workload: dict, source: str, costs: list[float], *, hits: int = 0, best_config: dict | None = None) -> dict:
    """A ``tasks`` entry as ``runlog.task_summary`` writes it (``best``: what the run saw)."""
    from tunedb.index.model.keys import key_of

    return {"name": "", "workload": workload, "workload_key": key_of(workload), "weight": 1.0, "source": source,
            "evaluations": len(costs), "measurements": len(costs) - hits, "cache_hits": hits, "remeasurements": 0,
            "best": min(costs), "best_config": best_config, "default_cost": None, "history": _history(costs),
            "seeded_from": ["gpu-a"] if source == "warm" else [], "stopped_by": "budget",
            "measure_s": 0.1 * (len(costs) - hits), "wall_s": 0.1 * len(costs), "saved_s": 0.0,
            "origins": {}, "origin_split": {}}


def _open(where: str, tmp_path: Path, name: str = "db"):
    return tunedb.open(tmp_path / name) if where == "parquet" else tunedb.open(f"memory:{tmp_path.name}-{name}")


def _estimator_db(where: str, tmp_path: Path):
    """One config with 3 records at 1, 2 and 10 ms (a worse one at ~5 ms) and the summary of the run
    that chose it, which saw 1 ms."""
    db = _open(where, tmp_path)
    db.commit([Record(EST_T, EST_W, EST_CFG, [c]) for c in (1e-3, 2e-3, 10e-3)])
    db.commit([Record(EST_T, EST_W, {"tile": 8}, [c]) for c in (5e-3, 5.1e-3, 5.2e-3)])
    task = _task(EST_W, "cold", [3e-3, 1e-3, 5e-3], best_config=EST_CFG)
    db.add_run(runlog.run_summary("tune", target=EST_T, tasks=[task], started=runlog.utc_now(), wall_s=1.0,
                                  label="cold"))
    return db


def _titles(node: Any) -> list[str]:
    """The ``title`` (tooltip) of every component below ``node``."""
    if isinstance(node, list):
        return [t for n in node for t in _titles(n)]
    if not isinstance(node, dict):
        return []
    props = node.get("props", {})
    return ([props["title"]] if props.get("title") else []) + _titles(props.get("children"))


@pytest.mark.parametrize("where", ["parquet", "memory"])
def test_every_cost_shown_is_the_estimators_with_n_and_interval(where, tmp_path):
    """The dashboard's tables and the report show a config's and an entry's cost as the estimator
    gives it (the median of the records' medians: 2 ms of 1, 2 and 10 ms; n=3), the same string in
    the runs table and the configs table; the run's own 1 ms only as "in-run"."""
    import html as _html

    from tunedb.index.model.keys import key_of
    from tunedb.transfer.apps.report import build_report

    db = _estimator_db(where, tmp_path)
    est = db.cost(EST_T, EST_W, EST_CFG)
    assert est is not None and est.value == pytest.approx(2e-3) and est.records == 3
    want = cost_brief(est)
    assert want.startswith("2.00 ms ±") and "n=3" in want and want.endswith("noisy")  # 1..10 ms: wide
    assert db.best_costs(EST_T, EST_W, 1)[0].estimate == est  # (what `tunedb best` shows)
    client = create_app(DashboardData(db)).server.test_client()

    ov = page(client, "/")
    entry_row = [r for r in rows(find(ov, "ov-entries-table")) if r[0] == "est-gpu"][0]
    assert entry_row[4] == want
    assert [r for r in rows(find(ov, "ov-active")) if r[0] == "est-gpu"][0][4] == want
    assert est.text() in _titles(find(ov, "ov-entries-table"))  # the interval in full, as the tooltip
    assert "1.00 ms" not in text(find(ov, "ov-entries-table"))

    en = page(client, "/entry", f"?t={key_of(EST_T)}&w={key_of(EST_W)}")
    best_rows = rows(find(en, "en-best"))
    assert json.loads(best_rows[0][1]) == EST_CFG and best_rows[0][2] == want
    assert best_rows[0][3] == "3" and best_rows[0][6] == "3"  # repeats and records of the config
    assert json.loads(best_rows[1][1]) == {"tile": 8} and best_rows[1][2] == cost_brief(db.cost(EST_T, EST_W, {"tile": 8}))
    run_rows = rows(find(en, "en-runs"))
    assert len(run_rows) == 1
    assert run_rows[0][5] == best_rows[0][2] == want   # the run's chosen config now: the same cell
    assert run_rows[0][6] == "1.00 ms"                 # what the run saw, labelled in-run
    header = text(find(en, "en-runs")["props"]["children"][0])
    assert "in-run" in header and "now (estimate)" in header
    assert est.text() in _titles(find(en, "en-runs"))
    curve = find(en, "g-entry")["props"]["figure"]
    assert want in curve["layout"]["title"]["text"]  # the curve (fastest measurement so far) names the estimate
    assert "fastest measurement so far" in json.dumps(curve["layout"])

    tr = page(client, "/trend")
    names = [t["name"] for t in find(tr, "g-best-time")["props"]["figure"]["data"]]
    assert any(want in n for n in names)

    res = build_report(db, tmp_path / "site")
    html_page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    section = html_page.split("<h2>Best configs</h2>", 1)[1].split("<h2>", 1)[0]
    assert f'<span title="{_html.escape(est.text())}">{_html.escape(want)}</span>' in section
    assert "1.00 ms" not in section
    assert res["summary"]["entries_with_ok"] == 1


def _demo_runs(db, *, all_parts_stored: bool, demo_first: bool) -> list[dict]:
    """A ``demo`` summary whose parts are tune-model runs, stored (with their run_ids) as runs of
    their own too, as ``tunedb demo`` stores them (``all_parts_stored=False``: the last part only
    inside the demo, as an older demo kept it); ``demo_first``: the demo is stored before its parts.
    Returns the parts (each a tuning run)."""
    import uuid

    from tunedb.transfer.apps.gain_fit import gain_model

    target = {"kind": "cpu", "name": "demo-cpu"}
    parts = []
    for i, (model, label, src, n) in enumerate((("A", "A first", "cold", 0), ("B", "B warm", "warm", 20),
                                                ("B", "B cold", "cold", 40), ("B", "B again", "warm", 60))):
        if all_parts_stored and i == 3:
            break
        task = _task({"family": "dense", "m": 8 * (i + 1)}, src, [3e-3, 2e-3, 2.5e-3], hits=i)
        part = runlog.run_summary("tune-model", target=target, tasks=[task], started=runlog.utc_now(), wall_s=1.0,
                                  label=label, model=model, records_before=n,
                                  extra={"gain": float(gain_model(n, 0.6, 0.05))})
        part["run_id"] = uuid.uuid4().hex
        parts.append(part)
    stored = parts if all_parts_stored else parts[:3]
    demo = runlog.run_summary("demo", target=target, tasks=[], started=runlog.utc_now(), wall_s=4.0, label="demo",
                              records_before=0, extra={"parts": parts, "evaluations": sum(p["evaluations"] for p in parts),
                                                       "cache_hits": sum(p["cache_hits"] for p in parts),
                                                       "measurements": sum(p["measurements"] for p in parts)})
    for s in ([demo, *stored] if demo_first else [*stored, demo]):
        db.add_run(s)
    return parts


@pytest.mark.parametrize("all_parts_stored,demo_first", [(True, False), (False, False), (True, True)])
def test_a_demo_and_its_parts_are_counted_once_everywhere(all_parts_stored, demo_first, tmp_path):
    from tunedb.transfer.apps.report import build_report

    db = _open("parquet", tmp_path)
    parts = _demo_runs(db, all_parts_stored=all_parts_stored, demo_first=demo_first)
    n = len(parts)
    assert len(db.runs()) == 4  # 3 stored parts + the demo (+ the 4th part inside it)
    data = DashboardData(db)
    client = create_app(data).server.test_client()
    assert text(find(page(client, "/"), "ov-runs")) == str(n)
    hits, evals = sum(p["cache_hits"] for p in parts), sum(p["evaluations"] for p in parts)
    assert text(find(page(client, "/"), "ov-hit-all")).endswith(f"({hits}/{evals})")
    runs = rows(find(page(client, "/pipeline"), "pl-runs"))
    names = [r[1] for r in runs]
    assert len(runs) == n and sorted(set(names)) == sorted(names), names   # each run listed once
    for p in parts:
        assert sum(p["label"] in name for name in names) == 1
    snap = data.snapshot
    assert snap.overview["runs"] == n and snap.overview["gain_points"] == n
    assert snap.overview["fit"] is not None and snap.overview["fit"]["points"] == n
    assert f"fit over {n} of {n} tuning runs" in text(find(page(client, "/trend"), "tr-fit"))
    hit_fig = find(page(client, "/pipeline"), "g-hit-rate")["props"]["figure"]
    assert len(hit_fig["data"][0]["x"]) == n                                # one bar per run

    res = build_report(db, tmp_path / "site")
    assert res["summary"]["stored_runs"] == n
    assert res["summary"]["saturation_fit"]["points"] == n
    html_page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    runs_table = html_page.split("<h2>Tuning runs</h2>", 1)[1].split("<h2>", 1)[0]
    for p in parts:
        assert runs_table.count(f"<td>{p['label']}</td>") == 1, p["label"]
    demo_row = re.search(r"<td>demo</td><td>demo</td><td>demo-cpu</td><td></td><td class=\"num\">(\d+)</td>", runs_table)
    if all_parts_stored:   # the container is no run of its own: no row
        assert demo_row is None
    else:                  # the part only it holds, below it; its totals are that part's
        assert demo_row is not None and int(demo_row.group(1)) == parts[3]["evaluations"]
        assert runs_table.count("demo › tune-model") == 1
    assert f"<td>tuning runs stored in the database</td><td>{n}</td>" in html_page


def test_the_comparison_shows_only_workloads_with_warm_and_cold_in_one_colour_per_label(tmp_path):
    """Panels only for the workloads with both a warm and a cold search (none empty, none
    overlapping), one colour per label in every panel, each label once in a shared legend; the reach
    table of the same workloads; no such workload: one line saying why."""
    from tunedb.transfer.apps.rundata import RunsData, add_summaries

    db = _open("memory", tmp_path)
    target = {"kind": "gpu", "name": "cmp-gpu"}
    w1, w2, w3, w4 = ({"family": "matmul", "m": m} for m in (16, 32, 64, 128))
    for label, tasks in (("warm", [_task(w1, "warm", [2e-3, 1e-3]), _task(w2, "warm", [4e-3, 3e-3]),
                                   _task(w4, "warm", [5e-3, 4e-3])]),
                         ("cold", [_task(w1, "cold", [3e-3, 2e-3]), _task(w3, "cold", [6e-3, 5e-3]),
                                   _task(w4, "cold", [7e-3, 6e-3])])):
        db.add_run(runlog.run_summary("tune", target=target, tasks=tasks, started=runlog.utc_now(), wall_s=1.0,
                                      label=label))
    data = DashboardData(db)
    client = create_app(data).server.test_client()
    cmp_ = page(client, "/comparison")
    fig = find(cmp_, "g-warm-cold")["props"]["figure"]
    spec = data.snapshot.figs["warm_vs_cold"]
    titles = [p.title for p in spec.panels]
    assert titles == [figures.short_workload(w1, 48), figures.short_workload(w4, 48)]  # not w2 (warm only), w3
    assert all(p.series and all(s.y for s in p.series) for p in spec.panels)             # no empty panel
    colors: dict[str, set] = {}
    for t in fig["data"]:
        colors.setdefault(t["name"], set()).add(t["line"]["color"])
    assert set(colors) == {"warm (cmp-gpu)", "cold (cmp-gpu)"}
    assert all(len(c) == 1 for c in colors.values()) and len({next(iter(c)) for c in colors.values()}) == 2
    shown = [t["name"] for t in fig["data"] if t["showlegend"]]
    assert sorted(shown) == sorted(colors)                                               # each label once
    assert len({t["legendgroup"] for t in fig["data"]}) == 2                             # toggled together
    lay = fig["layout"]
    boxes = [(lay[f"xaxis{s}"]["domain"], lay[f"yaxis{s}"]["domain"]) for s in ("", "2")]
    (xa, ya), (xb, yb) = boxes
    assert xa[1] < xb[0] or xb[1] < xa[0] or ya[1] < yb[0] or yb[1] < ya[0]              # no overlap
    reach = rows(find(cmp_, "cmp-reach"))
    assert sorted((r[0], r[1]) for r in reach) == sorted(
        (figures.short_workload(w, 48), lab) for w in (w1, w4) for lab in ("warm", "cold"))
    # the report draws the same figure
    runs = RunsData()
    add_summaries(runs, db.runs(), "database")
    assert [p.title for p in figures.warm_vs_cold_figure(runs.runs).panels] == titles
    assert figures.to_matplotlib(figures.warm_vs_cold_figure(runs.runs), tmp_path / "w.png")

    # many panels: rows of panels never overlap (room for the axis labels and the next title)
    many = [figures.Panel(f"w{i}", "evaluations", "best (s)", series=[figures.Series("a", [1, 2], [1, 2])])
            for i in range(7)]
    lay = figures.to_plotly_dict(figures.FigureSpec("k", "t", panels=many))["layout"]
    ys = sorted(lay[f"yaxis{'' if i == 0 else i + 1}"]["domain"] for i in range(7))
    px = lay["height"] - lay["margin"]["t"] - lay["margin"]["b"]
    gaps = [b[0] - a[1] for a, b in zip(ys, ys[1:]) if b[0] > a[0]]
    assert gaps and min(gaps) * px >= 90

    only_one = _open("memory", tmp_path, "one")
    only_one.add_run(runlog.run_summary("tune", target=target, tasks=[_task(w2, "warm", [4e-3, 3e-3])],
                                        started=runlog.utc_now(), wall_s=1.0, label="warm"))
    c1 = page(create_app(DashboardData(only_one)).server.test_client(), "/comparison")
    assert "Nothing to draw: no workload has both a warm and a cold search" in text(find(c1, "fig-warm_vs_cold"))
    assert find(c1, "g-warm-cold") is None and "no workload has both" in text(find(c1, "cmp-reach"))


def test_the_trend_never_shows_a_g_max_above_1(tmp_path):
    """Runs whose gains a fit with G_max up to 1.5 put at G_max = 1.5 ± 36 (G <= 1 by definition): the
    trend says "no fit" with the reason; runs that do show a level give a G_max <= 1."""
    from tunedb.transfer.apps.gain_fit import gain_model

    target = {"kind": "cpu", "name": "g-cpu"}

    def trend_of(name: str, points) -> str:
        db = _open("memory", tmp_path, name)
        for n, g in points:
            db.add_run(runlog.run_summary("tune", target=target, tasks=[_task({"family": "dense", "m": n + 1},
                                                                              "cold", [1e-3])],
                                          started=runlog.utc_now(), wall_s=1.0, label="cold", records_before=n,
                                          extra={"gain": g}))
        return text(find(page(create_app(DashboardData(db)).server.test_client(), "/trend"), "tr-fit"))

    bad = trend_of("bad", [(300, 0.1), (312, 0.3), (343, 0.2), (400, 0.5)])
    assert bad.startswith("no fit of G(n): ") and "bound 1" in bad and "G_max = 1.5" not in bad, bad
    good = trend_of("good", [(n, float(gain_model(n, 0.8, 1e-3))) for n in (0, 300, 1000, 3000, 8000)])
    m = re.search(r"G_max = ([0-9.e+-]+) ± ", good)
    assert m is not None and float(m.group(1)) == pytest.approx(0.8, abs=1e-3) and "of 5 tuning runs" in good, good
