"""The dashboard against a hostile web page and hostile record text, with the real parts: a real
``tunedb dashboard`` process answering real HTTP requests (a forged ``Host`` header, as a DNS
rebinding attack sends it, is refused), and a real headless chromium (Selenium) showing a DB whose
target, workload and run names hold HTML: on every page they are text, never a link."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("dash")

from test_dashboard import start_dashboard as start  # noqa: E402
from test_dashboard_browser import browser  # noqa: E402

import tunedb  # noqa: E402
from tunedb.index import Record  # noqa: E402
from tunedb.transfer.apps.dashboard.server import HostCheck, host_name  # noqa: E402

from helpers import ROOT  # noqa: E402

EVIL_HREF = "http://evil/"
EVIL = f'<a href="{EVIL_HREF}">x</a>'
EVIL_W = f'<a href="{EVIL_HREF}">w</a>'
#: every <a> of the page, HTML or SVG, whose href or xlink:href names the evil site (their markup)
EVIL_LINKS = """return [...document.getElementsByTagNameNS('*', 'a')].filter(a =>
    ((a.getAttribute('href') || '') + (a.getAttributeNS('http://www.w3.org/1999/xlink', 'href') || '')
     + (a.getAttribute('xlink:href') || '')).includes('evil')).map(a => a.outerHTML);"""


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def request(url: str, host: str | None, path: str = "/", body: dict | None = None) -> tuple[int, dict, str]:
    """One real HTTP request to the server of ``url`` with ``host`` as its ``Host`` header (None:
    no Host header at all; a POST says ``Origin: http://<host>``, as a page of that host would);
    (status, headers lower-cased, body text)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("POST" if body is not None else "GET", path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        data = json.dumps(body).encode() if body is not None else b""
        if body is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(data)))
            if host is not None:
                conn.putheader("Origin", f"http://{host}")
        conn.endheaders(data or None)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def evil_db(path: Path) -> Path:
    """A Parquet DB whose target, workload and run names are HTML links: a normal entry plus the
    hostile one, each with enough records for a curve on /trend and its entry page."""
    db = tunedb.open(path)
    good = {"kind": "gpu", "name": "plain-gpu"}
    w = {"family": "matmul", "m": 64}
    w_evil = {"family": "matmul", "m": 64, "note": EVIL_W}
    db.commit([Record({"kind": "gpu", "name": EVIL}, w_evil, {"tile": i}, [1e-3 / (i + 1)] * 3) for i in range(6)]
              + [Record(good, w, {"tile": i}, [2e-3 / (i + 1)] * 3) for i in range(6)])
    db.add_run({"kind": "tune", "label": EVIL, "target": EVIL, "evaluations": 6, "cache_hits": 2, "measurements": 4,
                "tasks": [], "measure_s": 1.0, "query_s": 0.1, "wall_s": 1.2})
    db.close()
    return path


# ------------------------------------------------------------------------------ the Host check
def test_host_names_and_the_check_itself():
    assert host_name("[::1]:8050") == ("::1", "8050")
    assert host_name("Example.COM.:80") == ("example.com", "80")
    assert host_name("localhost") == ("localhost", None)
    check = HostCheck(lambda e, s: [b""], "127.0.0.1", ["dash.example.org", "proxy.example.org:8443"])
    for ok in ("127.0.0.1:8050", "localhost:8050", "LOCALHOST", "[::1]:8050", "localhost:9999", "10.1.2.3:8050",
               "dash.example.org", "dash.example.org:443", "proxy.example.org:8443"):
        assert check.allowed(ok), ok
    for bad in ("evil.example:8050", "evil.example", "127.0.0.1.evil.example:8050", "localhost.evil.example",
                "proxy.example.org:80", "proxy.example.org", "", None, "sub.localhost:8050"):
        assert not check.allowed(bad), bad


def test_a_forged_host_header_is_refused_by_the_real_server(tmp_path):
    db = evil_db(tmp_path / "db")
    proc, url = start(db)
    try:
        port = urlsplit(url).port
        for ok in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            status, headers, body = request(url, ok)
            assert status == 200 and "tunedb dashboard" in body, (ok, status, body[:200])
            assert headers.get("x-frame-options") == "DENY" and headers.get("x-content-type-options") == "nosniff"
        # what a DNS rebinding page sends: its own name, resolved to 127.0.0.1
        for forged in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", None):
            status, headers, body = request(url, forged)
            assert status == 403, (forged, status, body[:200])
            assert "DNS rebinding" in body and len(body.splitlines()) == 1 and "tunedb dashboard" in body
            assert headers["content-type"].startswith("text/plain") and "plain-gpu" not in body
        # the data endpoint too: the page callback never runs for a forged Host
        callback = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
                    "inputs": [{"id": "url", "property": "pathname", "value": "/"},
                               {"id": "url", "property": "search", "value": ""},
                               {"id": "version", "property": "data", "value": 1}],
                    "changedPropIds": ["url.pathname"], "state": []}
        status, _, body = request(url, f"evil.example:{port}", "/_dash-update-component", callback)
        assert status == 403 and "plain-gpu" not in body
        status, _, body = request(url, f"127.0.0.1:{port}", "/_dash-update-component", callback)
        assert status == 200 and "plain-gpu" in body
    finally:
        stop(proc)
    # --allow-host NAME serves that name (a reverse proxy's), and only that one
    proc, url = start(db, "--allow-host", "dash.example.org")
    try:
        assert request(url, "dash.example.org")[0] == 200
        assert request(url, "dash.example.org:8443")[0] == 200
        assert request(url, "evil.example")[0] == 403
    finally:
        stop(proc)


def test_a_bad_allow_host_is_one_line_exit_2(tmp_path):
    db = evil_db(tmp_path / "db")
    for bad in ("a b/c", "dash.example.org:80:81"):
        p = subprocess.run([sys.executable, "-m", "tunedb", "dashboard", "--db", str(db), "--port", "0",
                            "--allow-host", bad], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (bad, p.stderr)
        assert "Traceback" not in p.stderr and "is not a host name" in p.stderr, (bad, p.stderr)


# ------------------------------------------- raw requests: the Host header's syntax, malformed POSTs
def raw(url: str, head: str, body: bytes = b"") -> tuple[int, dict, str]:
    """Send ``head`` (the request line and headers, ``\r\n``-separated, without the blank line)
    and ``body`` byte for byte over a real socket to the server of ``url``, then read the answer
    to its end; (status, headers lower-cased, body text)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n" + body)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    top, _, text = answer.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, text.decode("utf-8", "replace")


def get(url: str, host: str) -> tuple[int, dict, str]:
    """``GET /`` with exactly ``host`` as the Host header's value."""
    return raw(url, f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One real ``tunedb dashboard`` process over the hostile DB: (URL, port)."""
    db = evil_db(tmp_path_factory.mktemp("served") / "db")
    proc, url = start(db)
    yield url, urlsplit(url).port
    stop(proc)


def test_a_host_header_must_be_exactly_one_host_and_port(served):
    url, port = served
    p = port
    good = [f"127.0.0.1:{p}", f"localhost:{p}", f"LocalHost:{p}", f"[::1]:{p}", f"[0:0:0:0:0:0:0:1]:{p}",
            "localhost", "127.0.0.1", f"localhost.:{p}", f"localhost:{p}   "]
    for host in good:
        status, headers, body = get(url, host)
        assert status == 200 and "tunedb dashboard" in body, (host, status, body[:200])
    bad = [f"localhost:{p}@evil.example", f"localhost:{p}, evil.example", f"localhost:{p},evil.example",
           f"evil.example@localhost:{p}", f"user:pw@127.0.0.1:{p}", f"localhost:{p}:{p}", f":{p}", "",
           f"local host:{p}", f"localhost :{p}", f"localhost:\t{p}", f"localhost:{p}/evil",
           f"localhost:{p}#evil.example", f"localhost:{p}?evil", "localhost:abc", "localhost:99999", "localhost:",
           "localhost:0", "::1", f"[::1%25evil.example]:{p}", f"[::1]evil.example:{p}", f"[evil.example]:{p}",
           f"evil.example:{p}", f"127.0.0.1.evil.example:{p}", f"sub.localhost:{p}", f"localhost..:{p}",
           f"xn--lcalhost-\u00e9:{p}", f"localhost:{p} evil.example"]
    assert len(bad) >= 10
    for host in bad:
        status, headers, body = get(url, host)
        assert status == 403, (host, status, body[:200])
        assert len(body.splitlines()) == 1 and "plain-gpu" not in body, (host, body[:200])
        assert headers.get("x-frame-options") == "DENY", host
    # two Host headers (each one good on its own) are not one host
    status, _, body = raw(url, f"GET / HTTP/1.1\r\nHost: localhost:{p}\r\nHost: evil.example\r\nConnection: close")
    assert status == 403, body[:200]
    status, _, body = raw(url, f"GET / HTTP/1.1\r\nHost: localhost:{p}\r\nHost: localhost:{p}\r\nConnection: close")
    assert status == 403, body[:200]


def callback_body(pathname: object = "/") -> dict:
    """A call of the page callback, as the Dash renderer sends it."""
    return {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": pathname},
                       {"id": "url", "property": "search", "value": ""},
                       {"id": "version", "property": "data", "value": 1}],
            "changedPropIds": ["url.pathname"], "state": []}


def post(url: str, headers: dict[str, str | None], body: bytes, path: str = "/_dash-update-component"
         ) -> tuple[int, dict, str]:
    """A raw ``POST`` with the good Host, Origin, Content-Type and Content-Length of ``body``,
    changed by ``headers`` (a value of None leaves that header out)."""
    port = urlsplit(url).port
    sent = {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json",
            "Content-Length": str(len(body)), "Connection": "close"}
    sent.update(headers)
    head = "\r\n".join([f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in sent.items() if v is not None)])
    return raw(url, head, body)


def test_a_malformed_post_is_a_4xx_never_a_500(served):
    url, port = served
    good = json.dumps(callback_body()).encode()
    status, _, body = post(url, {}, good)
    assert status == 200 and "plain-gpu" in body, body[:300]
    # same origin under another of its names, and https behind a proxy that keeps the Host
    assert post(url, {"Host": f"localhost:{port}", "Origin": f"http://LOCALHOST:{port}"}, good)[0] == 200
    assert post(url, {"Host": "localhost", "Origin": "https://localhost"}, good)[0] == 200
    # values of the wrong type are no path: the overview, not an error
    status, _, body = post(url, {}, json.dumps(callback_body(pathname=5)).encode())
    assert status == 200 and "view-overview" in body, body[:300]

    def shape(**change: object) -> bytes:
        return json.dumps({**callback_body(), **change}).encode()

    garbage = b"\x00\xff{not json"
    cases = [  # (what, headers changed, body, expected status)
        ("no Origin", {"Origin": None}, good, 403),
        ("cross-origin", {"Origin": "http://evil.example"}, good, 403),
        ("cross-origin, garbage", {"Origin": "http://evil.example", "Content-Length": "zz"}, garbage, 403),
        ("cross-origin, same name, other port", {"Origin": f"http://127.0.0.1:{port + 1}"}, good, 403),
        ("Origin null", {"Origin": "null"}, good, 403),
        ("Origin with userinfo", {"Origin": f"http://u@127.0.0.1:{port}"}, good, 403),
        ("Origin with a path", {"Origin": f"http://127.0.0.1:{port}/x"}, good, 403),
        ("Origin of another scheme", {"Origin": f"ftp://127.0.0.1:{port}"}, good, 403),
        ("Content-Length not a number", {"Content-Length": "abc"}, good, 400),
        ("Content-Length negative", {"Content-Length": "-1"}, good, 400),
        ("two Content-Lengths", {"Content-Length": f"{len(good)}, {len(good)}"}, good, 400),
        ("Content-Length over the body", {"Content-Length": str(len(good) + 50)}, good, 400),
        ("no Content-Length", {"Content-Length": None}, good, 411),
        ("chunked", {"Content-Length": None, "Transfer-Encoding": "chunked"},
         b"%x\r\n" % len(good) + good + b"\r\n0\r\n\r\n", 411),
        ("oversized", {"Content-Length": str((1 << 20) + 1)}, b"{}", 413),
        ("oversized, huge", {"Content-Length": "9" * 12}, b"{}", 413),
        ("text/plain", {"Content-Type": "text/plain"}, good, 415),
        ("form", {"Content-Type": "application/x-www-form-urlencoded"}, b"a=1", 415),
        ("no Content-Type", {"Content-Type": None}, good, 415),
        ("not JSON", {}, b"{not json", 400),
        ("not UTF-8", {}, garbage, 400),
        ("empty body", {}, b"", 400),
        ("nested too deep", {}, b"[" * 5000 + b"]" * 5000, 400),
        ("a list", {}, b"[]", 400),
        ("an empty object", {}, b"{}", 400),
        ("unknown output", {}, shape(output="page.style"), 400),
        ("output not text", {}, shape(output=["page.children"]), 400),
        ("outputs of another", {}, shape(outputs={"id": "version", "property": "data"}), 400),
        ("inputs missing", {}, shape(inputs=None), 400),
        ("inputs too few", {}, shape(inputs=callback_body()["inputs"][:1]), 400),
        ("inputs not objects", {}, shape(inputs=[1, 2, 3]), 400),
        ("inputs of another", {}, shape(inputs=[{"id": "x", "property": "y"}] * 3), 400),
        ("state extra", {}, shape(state=[{"id": "version", "property": "data", "value": 0}]), 400),
        ("changedPropIds not a list", {}, shape(changedPropIds="url.pathname"), 400),
    ]
    for what, headers, data, expected in cases:
        status, answer, text = post(url, headers, data)
        assert status == expected, (what, status, text[:300])
        assert len(text.splitlines()) == 1 and text.startswith("tunedb dashboard: refused"), (what, text[:300])
        assert "plain-gpu" not in text and answer.get("x-content-type-options") == "nosniff", what
    # another path: Flask's own 405, not a 500
    status, _, _ = post(url, {}, good, path="/")
    assert status == 405
    # and the server still answers after all of that
    assert get(url, f"127.0.0.1:{port}")[0] == 200


# ------------------------------------------------------------------ HTML in names, in a browser


def test_html_in_names_is_text_on_every_page(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tunedb.index.model.keys import key_of

    db = evil_db(tmp_path / "db")
    tk = key_of({"kind": "gpu", "name": EVIL})
    wk = key_of({"family": "matmul", "m": 64, "note": EVIL_W})
    proc, url = start(db)
    driver = browser(tmp_path)
    try:
        wait = WebDriverWait(driver, 30)
        # path -> (the view's id, a graph on it, whether that graph names the hostile entry or run)
        pages = {"/": ("view-overview", None, False), "/pipeline": ("view-pipeline", "g-time-split", True),
                 "/comparison": ("view-comparison", None, False), "/trend": ("view-trend", "g-best-time", True),
                 f"/entry?t={tk}&w={wk}": ("view-entry", "g-entry", False)}
        for path, (view, graph, named) in pages.items():
            driver.get(url.rstrip("/") + path)
            wait.until(lambda d, v=view: d.find_elements(By.ID, v))
            if graph:  # the plotly figure is drawn (its legend, titles and ticks are SVG text)
                wait.until(lambda d, g=graph: d.find_elements(By.CSS_SELECTOR, f"#{g} .main-svg"))
                time.sleep(0.3)
            links = driver.find_elements(By.CSS_SELECTOR, f'a[href="{EVIL_HREF}"]')
            assert links == [], (path, [a.get_attribute("outerHTML") for a in links])
            # plotly draws its links as SVG <a xlink:href>, which that selector does not see
            assert driver.execute_script(EVIL_LINKS) == [], path
            shown = driver.execute_script(f"return document.getElementById('{view}').textContent")
            if path != "/comparison":  # (no warm and cold run: the comparison has nothing to name)
                assert EVIL in shown or EVIL_W in shown, (path, shown[:500])
            if named:
                drawn = driver.execute_script(f"return document.getElementById('{graph}').textContent")
                assert EVIL in drawn or EVIL_W in drawn, (path, drawn[:500])
        # on /trend the hostile target's curve is in the legend as its literal name
        driver.get(url.rstrip("/") + "/trend")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#g-best-time .legendtext"))
        legend = [e.get_attribute("textContent") for e in driver.find_elements(By.CSS_SELECTOR,
                                                                               "#g-best-time .legendtext")]
        assert any(t.startswith(EVIL) for t in legend), legend
        assert driver.find_elements(By.CSS_SELECTOR, f'a[href="{EVIL_HREF}"]') == [] and driver.execute_script(EVIL_LINKS) == []
    finally:
        driver.quit()
        stop(proc)
