"""``tunedb doctor``: the machine check as a command (JSON and human forms, bad input)."""

from __future__ import annotations

import json

from helpers import run_cli


def test_doctor_json_is_one_object():
    p = run_cli("doctor", "--json", "--seconds", "0.3", timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1
    rep = json.loads(lines[0])
    assert rep["verdict"] in ("fit", "noisy") and (rep["verdict"] == "noisy") == bool(rep["problems"])
    assert isinstance(rep["problems"], list) and isinstance(rep["advice"], list)
    ref = rep["reference"]
    assert ref["blocks"] >= 5 and ref["median_s"] > 0 and ref["cv"] >= 0 and 0.3 <= ref["seconds"] < 10
    assert {"loadavg", "running", "cpus", "freq_mhz", "governor", "turbo"} <= set(rep["context"])
    assert p.stderr == ""


def test_doctor_human_report_has_the_verdict_line():
    p = run_cli("doctor", "--seconds", "0.3", timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    verdict = [x for x in out if x.startswith("verdict: ")]
    assert len(verdict) == 1 and (verdict[0] == "verdict: fit to measure" or verdict[0].startswith("verdict: noisy: "))
    assert any(x.split()[0] in ("OK", "WARN") and "reference kernel: median" in x and "blocks, CV" in x for x in out)
    assert any("load average" in x for x in out)
    if verdict[0].startswith("verdict: noisy"):
        assert "advice:" in out


def test_doctor_bad_seconds_is_one_line_and_exit_2():
    for bad in ("-1", "0", "nan", "abc"):
        p = run_cli("doctor", "--seconds", bad, timeout=120)
        assert p.returncode == 2 and p.stdout == ""
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("tunedb: error: ")
