"""Command-line basics: ``tunedb workloads``, workload and config validation before any lookup,
user mistakes that store or create nothing, ``--json`` errors, interval labels and help texts."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record

from helpers import kernel_tuner_file, tree_state

TUNEDB = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "tunedb"
T = {"kind": "cpu", "name": "cli-basics"}
T2 = {"kind": "cpu", "name": "cli-other"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}
W_EXTRA = {"family": "matmul", "M": 16, "N": 16, "K": 16, "dtype": "float32"}
W_FOREIGN = {"family": "gemm", "M": 1024, "layout": "row major, packed"}


def tunedb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The ``tunedb`` executable of this environment (falls back to ``python -m tunedb``)."""
    import sys

    cmd = [str(TUNEDB)] if TUNEDB.is_file() else [sys.executable, "-m", "tunedb"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def one_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: "), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("basics") / "db"
    db = ParquetStore.open(p)
    db.commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(3)]
              + [Record(T, W_EXTRA, {"tile": 4}, [2e-3]), Record(T2, W_FOREIGN, {"tile": 1}, [5e-3])])
    db.close()
    return p


# ---------------------------------------------------------------------------- tunedb workloads
def test_workloads_lines_are_accepted_back_by_best(db_path, tmp_path):
    """Every workload ``tunedb workloads -q`` prints, of a native, an extra-key, a foreign and an
    imported Kernel Tuner workload (lists as values), answers ``tunedb best --workload``."""
    doc = json.loads(gzip.decompress(kernel_tuner_file("A4000").read_bytes()))
    doc["cache"] = dict(list(doc["cache"].items())[:30])  # a real cache file, cut to 30 configs
    small = tmp_path / "A4000.json"
    small.write_text(json.dumps(doc))
    kt = tunedb("import", "kernel-tuner", str(small), "--db", str(db_path), "--no-models")
    assert kt.returncode == 0, kt.stderr
    listing = json.loads(tunedb("workloads", "--db", str(db_path), "--json").stdout)
    pairs = [(t["target_key"], w["spec"]) for t in listing["targets"] for w in t["workloads"]]
    assert len(pairs) == 4 and any(s.startswith("{") for _, s in pairs)  # the Kernel Tuner one is JSON
    quiet = tunedb("ls", "--db", str(db_path), "-q").stdout.splitlines()
    assert sorted(quiet) == sorted(s for _, s in pairs)
    for tkey, spec in pairs:
        b = tunedb("best", "--db", str(db_path), "--target", tkey, "--workload", spec, "--json")
        assert b.returncode == 0, (spec, b.stderr)
        got = json.loads(b.stdout)
        assert got["configs"], spec


def test_workloads_filters_and_text(db_path):
    text = tunedb("workloads", "--db", str(db_path), "--target", "cli-basics")
    assert text.returncode == 0, text.stderr
    assert "cli-basics" in text.stdout and "matmul:K=8,M=8,N=8" in text.stdout and "gemm" not in text.stdout
    assert "3 records (3 ok), best 1.00 ms" in text.stdout  # the best of configs at 1, 2, 3 ms
    fam = json.loads(tunedb("ls", "--db", str(db_path), "--family", "gemm", "--json").stdout)
    assert [w["workload"] for t in fam["targets"] for w in t["workloads"]] == [W_FOREIGN]
    sub = json.loads(tunedb("ls", "--db", str(db_path), "--match", "DTYPE=float", "--json").stdout)
    assert [w["workload"] for t in sub["targets"] for w in t["workloads"]] == [W_EXTRA]
    one_error(tunedb("workloads", "--db", str(db_path), "--target", "no-such-target"))


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("spec,needle", [
    ("matmull:M=8,N=8,K=8", "unknown workload family 'matmull'"),
    ("matmul:M=8,N=abc,K=8", "N='abc' must be an integer"),
    ("matmul:M=8,N=8,K=8,X=3", "unknown workload key 'X'"),
    ("gemm:M=1024,layuot=row", "unknown workload key 'layuot'"),
    ("gemm:M=abc", "M='abc' must be a number"),
    ("matmul:M", "is not key=value"),
])
def test_bad_workloads_are_validation_errors_before_any_lookup(db_path, spec, needle):
    before = tree_state(db_path)
    line = one_error(tunedb("best", "--db", str(db_path), "--target", "cli-basics", "--workload", spec))
    assert needle in line and "has no records" not in line
    assert tree_state(db_path) == before


def test_extra_key_and_foreign_workloads_stored_in_the_db_are_accepted(db_path):
    for spec in ("matmul:M=16,N=16,K=16,dtype=float32", '{"family": "gemm", "M": 1024, "layout": "row major, packed"}'):
        r = tunedb("best", "--db", str(db_path), "--target", "cli-basics" if "matmul" in spec else "cli-other",
                   "--workload", spec)
        assert r.returncode == 0, r.stderr


def test_measure_with_a_bad_config_stores_nothing(tmp_path):
    db = tmp_path / "fresh"
    line = one_error(tunedb("measure", "--db", str(db), "--target", "cpu-native-t1", "--workload",
                            "matmul:M=8,N=8,K=8", "--config", '{"mc": 7}'))
    assert "--config" in line and "knob" in line
    assert not db.exists()


def test_export_into_a_missing_directory_creates_nothing(db_path, tmp_path):
    out = tmp_path / "nonexistent" / "dir" / "out.jsonl"
    line = one_error(tunedb("export", "--db", str(db_path), "--format", "jsonl", str(out)))
    assert "does not exist" in line
    assert not (tmp_path / "nonexistent").exists()


# ---------------------------------------------------------------------------- --json errors
@pytest.mark.parametrize("args", [
    ["--json", "best", "--target", "nope", "--workload", "matmul:M=8,N=8,K=8"],
    ["best", "--json", "--target", "cli-basics", "--workload", "matmull:M=8"],
    ["--json", "best", "--no-such-option"],
    ["--json", "nosuchcommand"],
])
def test_json_errors_are_one_json_object_on_stdout(db_path, args):
    r = tunedb(*args, "--db", str(db_path)) if args[-1] != "nosuchcommand" else tunedb("--db", str(db_path), *args)
    line = one_error(r)
    out = r.stdout.strip().splitlines()
    assert len(out) == 1, r.stdout
    obj = json.loads(out[0])
    assert obj == {"error": line.removeprefix("tunedb: error: "), "exit": 2}


# ---------------------------------------------------------------------------- interval labels
def test_interval_labels_state_95_percent_whenever_reached():
    from tunedb.index.model.estimate import LEVEL, ci_label, estimate, order_rank

    # an order-statistic interval's exact coverage is 96-99 % for many n: all of them are 95 % intervals
    levels = {n: order_rank(n)[1] for n in range(2, 40)}
    assert {round(c * 100) for c in levels.values() if c >= LEVEL} > {95}  # the odd levels exist
    for n, c in levels.items():
        assert ci_label(c) == ("95 % CI" if c >= LEVEL else f"{int(c * 100)} % CI"), n
    many = estimate([Record(T, W, {"tile": 1}, [1e-3 * (1 + i / 100)]) for i in range(7)])
    assert many is not None and many.coverage > LEVEL and many.interval_text().startswith("95 % CI ")
    few = estimate([Record(T, W, {"tile": 1}, [1e-3, 2e-3])])
    assert few is not None and few.interval_text().startswith(ci_label(few.coverage))


# ---------------------------------------------------------------------------- help texts
def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of actions
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from _walk(sub, (*path, name))
        else:
            yield path, action


def test_every_option_of_every_command_has_help():
    from tunedb.transfer.cli.main import build_parser

    missing = [f"{' '.join(p)} {'/'.join(a.option_strings) or a.dest}" for p, a in _walk(build_parser(), ("tunedb",))
               if not (a.help and str(a.help).strip())]
    assert not missing, missing
    commands = [p for p, a in _walk(build_parser(), ("tunedb",)) if len(p) == 2]
    assert len(set(commands)) >= 25


# ---------------------------------------------------------------------------- plot axes
def test_plot_axes_of_seconds_use_si_prefixes():
    from matplotlib.figure import Figure

    from tunedb.transfer.apps.figures import Panel, best_over_time_figure, seconds_axis, seconds_tick, to_plotly_dict

    assert [seconds_tick(v) for v in (1e-4, 1.5e-3, 2.0, 2.5e-8, 0.0)] == ["100 us", "1.5 ms", "2 s", "25 ns", "0 s"]
    assert Panel("", "", "fastest so far (s)").yseconds and Panel("", "", "fastest so far (s)").ylabel == "fastest so far"
    for log in (True, False):
        fig = Figure()
        ax = fig.subplots()
        ax.plot([1, 2, 3], [3e-5, 2e-4, 4e-3])
        if log:
            ax.set_yscale("log")
        seconds_axis(ax.yaxis, log)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(t.endswith((" us", " ms", " s")) for t in labels), labels
        assert not any("e-" in t or "10^" in t for t in labels), labels
    spec = best_over_time_figure([("a", [1_000_000, 2_000_000], [2e-3, 1e-3])])
    ya = to_plotly_dict(spec)["layout"]["yaxis"]
    assert ya["ticksuffix"] == "s" and ya["exponentformat"] == "SI"


# ---------------------------------------------------------------------------- targets --probe
def test_probe_describes_the_cpu_with_or_without_a_gpu():
    import platform

    from tunedb.index.hardware.probe import X86_LEVELS, isa_level

    v2 = [f for _, need in X86_LEVELS[:1] for f in need]
    v3 = [f for _, need in X86_LEVELS[:2] for f in need]
    assert (isa_level("x86_64", []), isa_level("x86_64", v2), isa_level("x86_64", v3)) == \
        ("x86-64", "x86-64-v2", "x86-64-v3")
    assert isa_level("aarch64", v3) is None
    r = tunedb("targets", "--probe")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("cpu: ") and "cores usable" in last and "vector " in last and "uarch " in last
    if platform.machine() == "x86_64":
        assert "ISA x86-64" in last
    doc = json.loads(tunedb("targets", "--probe", "--json").stdout)
    assert doc["cpu"]["isa_level"] is None or doc["cpu"]["isa_level"] in last


@pytest.mark.parametrize("w", [
    {"family": "matmul", "M": 8, "N": 16, "K": 32},
    {"family": "softmax", "M": 4, "N": 100, "scale": 0.5, "fast": True},
    {"family": "x", "s": "128"},                      # a digit string stays a string
    {"family": "x", "s": "True"},                     # so does a word that reads as a bool
    {"family": "x", "s": "a,b=c"},                    # separators in a value
    {"family": "x", "s": ""},
    {"family": "x", "big": 1e20, "neg": -3, "f": float(3)},
    {"family": "convolution_kernel", "kernel": "convolution_kernel", "params": ["block_size_x", "tile_size_x"],
     "problem_size": [4096, 4096]},
    {"family": "tir", "shapes": [[128, 128], [128, 128]], "dtypes": ["float32"], "opts": {"a": 1}},
])
def test_a_printed_workload_reads_back_to_the_same_key(w):
    from tunedb.index.model.keys import key_of
    from tunedb.transfer.cli.workload_spec import parse_spec, workload_spec

    spec = workload_spec(w)
    back = parse_spec(spec, lambda path: pytest.fail(f"read {path}"))
    assert back == w and key_of(back) == key_of(w) and all(type(back[k]) is type(v) for k, v in w.items()), spec
    if all(isinstance(v, (int, bool)) for k, v in w.items() if k != "family"):
        assert not spec.startswith("{"), spec  # the short form whenever it reads back
    if any(isinstance(v, (list, dict)) for v in w.values()):
        assert spec.startswith("{"), spec
