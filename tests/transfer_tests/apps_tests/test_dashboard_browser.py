"""``tunedb dashboard`` in a real browser: headless Debian chromium through chromium-driver (Selenium)
opens the dashboard (a real ``tunedb dashboard`` process) of a DB that another process keeps writing
to, checks that the four views and an entry page render (DOM contents, no console errors), that new
measurements and a ``tunedb tune`` run appear without reloading, and keeps a screenshot of each view
in ``$TUNEDB_SCREENSHOT_DIR`` (CI artifacts; a temp directory when unset)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("dash")

from test_dashboard import make_db, start_dashboard  # noqa: E402

from helpers import ROOT, kernel_tuner_file  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

WRITER = """
import sys, time, tunedb
from tunedb.index import Record
db = tunedb.open(sys.argv[1], create=False)
for i in range(int(sys.argv[2])):
    db.commit(Record({"kind": "gpu", "name": "live-gpu"}, {"family": "matmul", "m": 128}, {"tile": i},
                     [1e-3 / (1 + i % 7)]))
    print(i + 1, time.time(), flush=True)
    time.sleep(float(sys.argv[3]))
"""


def browser(tmp_path: Path, console_log: bool = True):
    """A headless chromium (a fresh profile), its console log kept when ``console_log``; skips
    (fails under CI) when chromium, chromium-driver or selenium is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        why = f"the browser test needs {', '.join(missing)} (Debian: apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1400,1700", f"--user-data-dir={tmp_path / 'chrome-profile'}"):
        opts.add_argument(flag)
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("TUNEDB_SCREENSHOT_DIR") or tmp_path / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


class _Lines:
    """The stdout lines of a process, collected by a thread: ``[(count, commit time), ...]``."""

    def __init__(self, proc: subprocess.Popen):
        self.items: list[tuple[int, float]] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            n, t = line.split()
            self.items.append((int(n), float(t)))


@pytest.mark.slow
def test_dashboard_in_a_real_browser(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    db = tmp_path / "db"
    make_db(db)
    import tunedb

    base = tunedb.open(db, create=False).records(include_stale=False).num_rows
    shots = _shots_dir(tmp_path)
    driver = browser(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), "400", "0.5"], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    commits = _Lines(writer)
    dash_proc, url = start_dashboard(db)
    wait = WebDriverWait(driver, 30, poll_frequency=0.05)

    def txt(id_: str) -> str:
        """The text of the element ``id_`` now ('' when absent; the page re-renders as the DB changes,
        so elements are read in one script call, never held)."""
        return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.innerText : '';",
                                     id_)

    def count(id_: str) -> int:
        t = txt(id_)
        return int(t) if t.isdigit() else -1

    try:
        def view(path: str, vid: str, name: str, graphs: tuple[str, ...] = ()) -> None:
            driver.get(url + path.lstrip("/"))
            wait.until(lambda d: d.find_elements(By.ID, vid))
            for gid in graphs:  # plotly has drawn the figure's SVG
                wait.until(lambda d, g=gid: d.find_elements(By.CSS_SELECTOR, f"#{g} .main-svg"))
            time.sleep(0.3)
            shoot(name)

        def shoot(name: str) -> None:
            """A screenshot of the whole page (the window sized to it)."""
            driver.set_window_size(1400, 500)  # (then the document's height is its content's)
            time.sleep(0.3)
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1400, min(int(height) + 160, 4000))
            time.sleep(0.5)
            driver.save_screenshot(str(shots / f"dashboard-{name}.png"))

        # overview: the counts; records committed by the writer appear without a reload
        view("/", "view-overview", "overview")
        assert txt("ov-targets") in ("2", "3")
        assert "old-gpu" in txt("ov-stale")
        assert "NVIDIA A100-PCIE-40GB" in txt("ov-entries-table")
        assert " n=" in txt("ov-entries-table")  # costs: the estimator's, with n (and the interval as a tooltip)
        assert "hit rate, runs since this dashboard started" in txt("ov-table") and "hit rate, all runs" in txt("ov-table")
        latencies = []
        seen_before = count("ov-records")
        for _ in range(4):
            target = seen_before + 1
            wait.until(lambda d, n=target: count("ov-records") >= n)
            now = time.time()
            shown = count("ov-records")
            done = dict(commits.items)
            if shown - base in done:
                latencies.append(now - done[shown - base])
            seen_before = shown
        assert latencies, "no commit of the writer was seen"
        print(f"browser: a commit by another process shown after {[round(x, 2) for x in latencies]} s "
              f"(median {statistics.median(latencies):.2f} s)")
        assert max(latencies) < 10

        # pipeline: the stored runs; a `tunedb tune` run appears while the page stays open
        view("/pipeline", "view-pipeline", "pipeline", ("g-time-split",))
        runs = txt("pl-runs")
        assert "tune warm NVIDIA RTX A4000" in runs and "tune cold NVIDIA RTX A4000" in runs
        assert "from NVIDIA A100-PCIE-40GB" in runs and "live-gpu" in txt("pl-active")
        tune = subprocess.run([sys.executable, "-m", "tunedb", "tune", "--db", str(db), "--replay",
                               str(kernel_tuner_file("A6000")), "--budget", "8", "--json"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert tune.returncode == 0, tune.stderr
        ended = time.time()
        wait.until(lambda d: "NVIDIA RTX A6000" in txt("pl-runs"))
        cli_latency = time.time() - ended
        print(f"browser: the `tunedb tune` run shown {cli_latency:.2f} s after the command exited")
        assert cli_latency < 10
        shoot("pipeline")

        view("/comparison", "view-comparison", "comparison", ("g-warm-cold",))
        reach = txt("cmp-reach")
        assert "warm" in reach and "cold" in reach
        legend = txt("g-warm-cold")
        assert "warm (NVIDIA RTX A4000)" in legend and "cold (NVIDIA RTX A4000)" in legend

        view("/trend", "view-trend", "trend", ("g-best-time", "g-records-time", "g-gain"))
        assert "replay" in txt("g-records-time")

        # an entry page, reached by a click from the overview
        driver.get(url)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ov-entries-table a"))
        # (a click on the link; the page may re-render under it, then the click is tried again)
        click = ("for (const a of document.querySelectorAll('#ov-entries-table a')) "
                 "{ if (a.innerText === arguments[0]) { a.click(); return true; } } return false;")
        wait.until(lambda d: d.execute_script(click, "NVIDIA RTX A4000"))
        wait.until(lambda d: d.find_elements(By.ID, "en-best"))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#g-entry .main-svg"))
        best = txt("en-best")
        assert "replayed measurement" in best and "best of a" in best and " n=" in best
        assert "in-run" in txt("en-runs") and " n=" in txt("en-runs")
        shoot("entry")

        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not severe, severe
        (shots / "dashboard-latency.json").write_text(json.dumps(
            {"commit_to_dom_s": latencies, "tune_exit_to_dom_s": cli_latency}, indent=1))
    finally:
        driver.quit()
        writer.kill()
        writer.wait(timeout=10)
        dash_proc.terminate()
        dash_proc.wait(timeout=10)
        shutil.rmtree(tmp_path / "chrome-profile", ignore_errors=True)
