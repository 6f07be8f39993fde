"""The Dash application of ``tunedb dashboard``.

Why Dash: it is Plotly's well-kept web framework on Flask; it serves plotly.js and its React
components from the installed Python packages (``serve_locally``: nothing from a CDN, no
network at run time), live updates are a ``dcc.Interval`` driving server-side callbacks, and
the charts are plotly figures built in Python (:func:`tunedb.transfer.apps.figures.to_plotly`,
the same figure definitions the static report draws with matplotlib) - no hand-written
JavaScript.

Pages: ``/`` overview, ``/pipeline``, ``/comparison``, ``/trend`` and ``/entry?t=<target_key>&w=
<workload_key>``.  Every ``refresh_s`` the browser asks for the snapshot's version (a tiny
callback); only when it changed is the page re-rendered, from the latest snapshot
(:class:`~.data.DashboardData`).  The page callback never reads the records itself.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from tunedb.transfer.apps.dashboard import views
from tunedb.transfer.apps.dashboard.data import DashboardData

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1280px;
color:#222;padding:0 1em 2em}
header{display:flex;align-items:baseline;gap:1.5em;border-bottom:1px solid #ddd;flex-wrap:wrap}
header h1{font-size:1.4em;margin:.6em 0}
nav a{margin-right:1em;text-decoration:none;color:#1f5fa8;font-weight:500} nav a.active{color:#000;
border-bottom:2px solid #1f5fa8}
.status{color:#666;font-size:.8em;margin:.3em 0} .note{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0} td,th{border:1px solid #ddd;padding:.25em .5em;
text-align:left;vertical-align:top} th{background:#f3f3f3} td.num{text-align:right}
code{font-size:.85em;word-break:break-all} .figure{margin:1em 0} .workload{font-family:monospace;font-size:.85em}
"""

_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + _CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""


def _query(search: str | None) -> dict[str, str]:
    """The first value of each query parameter of ``?a=b&...``."""
    return {k: v[0] for k, v in parse_qs((search or "").lstrip("?")).items() if v}


def render(data: DashboardData, pathname: str | None, search: str | None) -> Any:
    """The page at ``pathname`` (+ ``search``) from the latest snapshot."""
    from tunedb.index.contract.checks import is_key

    snap = data.snapshot
    path = (pathname or "/").rstrip("/") or "/"
    name = {"/": "overview", "/overview": "overview", "/pipeline": "pipeline", "/comparison": "comparison",
            "/trend": "trend", "/entry": "entry"}.get(path)
    if name == "entry":
        q = _query(search)
        tk, wk = q.get("t", ""), q.get("w", "")
        body = views.entry(data.entry(tk, wk) if is_key(tk) and is_key(wk) else None, tk, wk)
    elif name is not None:
        body = getattr(views, name)(snap)
    else:
        body = views.not_found(path)
    return [views.status_line(snap, data.last_error), views.nav(name or ""), body]


def create_app(data: DashboardData, *, refresh_s: float = 0.5) -> Any:
    """The Dash app over ``data`` (whose poller the caller starts); the browser checks for a new
    snapshot every ``refresh_s`` seconds.  Assets are served locally; dev tools are off."""
    import dash
    from dash import Input, Output, State, dcc, html, no_update

    app = dash.Dash(__name__, serve_locally=True, title="tunedb dashboard", update_title=None,
                    suppress_callback_exceptions=True, assets_ignore=".*", compress=False)
    app.index_string = _INDEX
    app.layout = html.Div([
        dcc.Location(id="url", refresh=False),
        dcc.Interval(id="tick", interval=max(int(refresh_s * 1000), 100), n_intervals=0),
        dcc.Store(id="version", data=0),
        html.Header([html.H1("tunedb dashboard")]),
        html.Div(id="page"),
    ])

    @app.callback(Output("version", "data"), Input("tick", "n_intervals"), State("version", "data"))
    def _version(_n: int, seen: int | None) -> Any:
        v = data.snapshot.version
        return no_update if v == seen else v

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("url", "search"),
                  Input("version", "data"))
    def _page(pathname: Any, search: Any, _version: Any) -> Any:
        # (the values come from the request: anything but text is no path / no query)
        return render(data, pathname if isinstance(pathname, str) else None,
                      search if isinstance(search, str) else None)

    return app
