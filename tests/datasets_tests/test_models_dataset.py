"""The shipped models (tunedb.datasets.models): shapes, weights, kernel validity, the file format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunedb.datasets import models
from tunedb.datasets.models import Model, Task, load_model, model_names
from tunedb.transfer.kernels import family_of

SIZES = {"resnet18": 64, "resnet34": 64, "mobilenet_v2": 64, "bert_block_256": 32, "bert_block_512": 32}
ALL_SPECS = [n for n in SIZES] + [f"{n}@{s}" for n, s in SIZES.items()]


def conv_weights(m: Model) -> int:
    return sum(t.weight for t in m.tasks if t.workload["family"] == "conv2d")


def by_name(m: Model) -> dict[str, Task]:
    return {t.name: t for t in m.tasks}


def test_names() -> None:
    assert model_names() == ["bert_block_256", "bert_block_512", "mobilenet_v2", "resnet18", "resnet34"]
    assert sorted(p.stem for p in models.SHIPPED_DIR.glob("*.json")) == model_names()


@pytest.mark.parametrize("name", sorted(SIZES))
def test_shipped_file_is_the_architecture_output(name: str) -> None:
    arch = models.ARCHITECTURES[name]()
    assert load_model(name) == arch
    assert (models.SHIPPED_DIR / f"{name}.json").read_text(encoding="utf-8") == arch.to_json()
    default = 128 if name.startswith("bert") else 224
    assert load_model(f"{name}@{default}") == arch


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_every_workload_validates_in_its_family(spec: str) -> None:
    m = load_model(spec)
    assert m.name == spec
    keys = set()
    for t in m.tasks:
        fam = family_of(t.workload)
        assert fam.validate_workload(t.workload) == t.workload, t.name  # complete: every option given
        keys.add(json.dumps(t.workload, sort_keys=True))
        assert t.weight >= 1 and t.layers
    assert len(keys) == len(m.tasks), "identical shapes must be merged into one task"
    layers = [x for t in m.tasks for x in t.layers]
    assert len(layers) == len(set(layers))


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_omitted_flops_and_shares(spec: str) -> None:
    m = load_model(spec)
    task_flops = sum(t.weight * family_of(t.workload).flops(t.workload) for t in m.tasks)
    total = task_flops + sum(o["flops"] for o in m.omitted)
    for o in m.omitted:
        assert o["count"] == len(o["layers"]) >= 1
        assert o["flop_share"] == pytest.approx(o["flops"] / total, rel=1e-3, abs=1e-12)


def test_torchvision_published_op_counts() -> None:
    # torchvision's weight metadata "_ops" (GMACs at 224x224): resnet18 1.814, resnet34 3.664,
    # mobilenet_v2 0.301 (its depthwise convs included); a multiply-add is 2 FLOPs in tunedb
    def gmacs(name: str) -> float:
        m = load_model(name)
        f = sum(t.weight * family_of(t.workload).flops(t.workload) for t in m.tasks)
        f += sum(o["flops"] for o in m.omitted if o["name"].startswith("depthwise"))
        return f / 2e9

    assert round(gmacs("resnet18"), 3) == 1.814
    assert round(gmacs("resnet34"), 3) == 3.664
    assert round(gmacs("mobilenet_v2"), 3) == 0.301


@pytest.mark.parametrize("spec", ["resnet18", "resnet18@64", "resnet34", "resnet34@64"])
def test_resnet_counts(spec: str) -> None:
    m = load_model(spec)
    deep = spec.startswith("resnet34")
    # stem + 2 convs per BasicBlock (8 or 16 blocks) + 3 downsample 1x1 convs
    assert conv_weights(m) == (36 if deep else 20)
    fcs = [t for t in m.tasks if t.workload["family"] == "matmul"]
    assert len(fcs) == 1 and fcs[0].weight == 1 and fcs[0].layers == ["fc"]
    assert fcs[0].workload == {"family": "matmul", "M": 1, "N": 1000, "K": 512}
    assert len(m.tasks) == 12  # 11 distinct conv shapes + fc
    omitted = {o["name"]: o["count"] for o in m.omitted}
    assert omitted["max_pool 3x3/2"] == 1
    assert omitted["residual add"] == (16 if deep else 8)
    assert omitted["batch_norm"] == conv_weights(m)


def test_resnet18_shapes() -> None:
    t = by_name(load_model("resnet18"))
    assert t["conv1"].workload == {"family": "conv2d", "N": 1, "C": 3, "H": 224, "W": 224, "K": 64, "R": 7, "S": 7,
                                   "stride": 2, "pad": 3, "layout": "NCHW"}
    assert t["layer1.0.conv1"].workload["H"] == 56 and t["layer1.0.conv1"].weight == 4  # after the 3x3/2 max-pool
    ds = t["layer2.0.downsample.0"].workload
    assert (ds["C"], ds["H"], ds["K"], ds["R"], ds["stride"], ds["pad"]) == (64, 56, 128, 1, 2, 0)
    assert t["layer2.0.conv2"].layers == ["layer2.0.conv2", "layer2.1.conv1", "layer2.1.conv2"]
    last = t["layer4.0.conv2"].workload
    assert (last["C"], last["H"], last["K"]) == (512, 7, 512)
    small = by_name(load_model("resnet18@64"))
    assert small["layer1.0.conv1"].workload["H"] == 16 and small["layer4.0.conv2"].workload["H"] == 2


def test_resnet34_shares_every_conv_shape_of_resnet18() -> None:
    def convs(spec: str) -> set[str]:
        return {json.dumps(t.workload, sort_keys=True) for t in load_model(spec).tasks
                if t.workload["family"] == "conv2d"}

    for size in ("", "@64"):
        assert convs("resnet34" + size) == convs("resnet18" + size)
        assert len(convs("resnet18" + size)) == 11


@pytest.mark.parametrize("spec", ["mobilenet_v2", "mobilenet_v2@64"])
def test_mobilenet_v2_counts(spec: str) -> None:
    m = load_model(spec)
    omitted = {o["name"]: o["count"] for o in m.omitted}
    # torchvision: stem + 17 blocks (first without expand: 2 convs, others 3) + final 1x1 = 52 Conv2d;
    # the 17 depthwise ones are omitted
    assert omitted["depthwise conv2d 3x3"] == 17
    assert conv_weights(m) + omitted["depthwise conv2d 3x3"] == 52
    assert conv_weights(m) == 35
    assert omitted["batch_norm"] == 52
    assert omitted["residual add"] == 10
    assert omitted["relu6"] == 35
    for t in m.tasks:
        w = t.workload
        if w["family"] == "conv2d" and t.name != "features.0.0":
            assert (w["R"], w["S"], w["stride"], w["pad"]) == (1, 1, 1, 0), t.name
    fc = [t for t in m.tasks if t.workload["family"] == "matmul"]
    assert [t.workload for t in fc] == [{"family": "matmul", "M": 1, "N": 1000, "K": 1280}]
    assert len(m.tasks) == 21  # 20 distinct conv shapes + classifier


def test_mobilenet_v2_shapes() -> None:
    t = by_name(load_model("mobilenet_v2"))
    stem = t["features.0.0"].workload
    assert (stem["C"], stem["H"], stem["K"], stem["R"], stem["stride"], stem["pad"]) == (3, 224, 32, 3, 2, 1)
    assert t["features.1.conv.1"].workload["C"] == 32 and t["features.1.conv.1"].workload["K"] == 16
    assert t["features.1.conv.1"].workload["H"] == 112
    # the stride-2 depthwise conv of block 2 halves H between its expand (112) and project (56)
    assert t["features.2.conv.0.0"].workload["H"] == 112 and t["features.2.conv.0.0"].workload["K"] == 96
    assert t["features.2.conv.2"].workload["H"] == 56
    # block 3's expand (24 -> 144 at 56) has the same shape as block 4's
    assert t["features.3.conv.0.0"].layers == ["features.3.conv.0.0", "features.4.conv.0.0"]
    final = t["features.18.0"].workload
    assert (final["C"], final["H"], final["K"]) == (320, 7, 1280)


@pytest.mark.parametrize("name,hidden,heads", [("bert_block_256", 256, 4), ("bert_block_512", 512, 8)])
@pytest.mark.parametrize("seq", [128, 32])
def test_bert_block(name: str, hidden: int, heads: int, seq: int) -> None:
    m = load_model(name if seq == 128 else f"{name}@{seq}")
    h, d = hidden, hidden // heads
    assert d == 64
    expect = {
        "attention.self.qkv": ({"family": "matmul", "M": seq, "N": 3 * h, "K": h}, 1),
        "attention.self.scores": ({"family": "matmul", "M": seq, "N": seq, "K": d}, heads),
        "attention.self.softmax": ({"family": "softmax", "M": heads * seq, "N": seq}, 1),
        "attention.self.context": ({"family": "matmul", "M": seq, "N": d, "K": seq}, heads),
        "attention.output.dense": ({"family": "matmul", "M": seq, "N": h, "K": h}, 1),
        "intermediate.dense": ({"family": "matmul", "M": seq, "N": 4 * h, "K": h}, 1),
        "output.dense": ({"family": "matmul", "M": seq, "N": h, "K": 4 * h}, 1),
    }
    assert {t.name: (t.workload, t.weight) for t in m.tasks} == expect
    assert sum(t.weight for t in m.tasks) == 5 + 2 * heads
    assert m.input["seq_len"] == seq and m.input["hidden"] == h
    omitted = {o["name"]: o["count"] for o in m.omitted}
    assert omitted["layer_norm"] == 2 and omitted["gelu"] == 1 and omitted["residual add"] == 2


@pytest.mark.parametrize("spec", ["resnet18@1", "resnet18@8", "resnet34@7", "mobilenet_v2@1", "bert_block_256@1"])
def test_tiny_sizes_are_valid_networks(spec: str) -> None:
    # torchvision's ResNet and MobileNet-v2 accept inputs down to 1x1 (weights meta "min_size": (1, 1)):
    # every padded window still fits, so every layer stays valid
    for t in load_model(spec).tasks:
        family_of(t.workload).validate_workload(t.workload)


@pytest.mark.parametrize("spec", ["resnet18@0", "resnet18@", "resnet18@-3", "resnet18@6.5", "resnet18@x",
                                  "bert_block_512@0", "mobilenet_v2@ 64", "resnet18@1e3"])
def test_bad_sizes(spec: str) -> None:
    with pytest.raises(ValueError) as e:
        load_model(spec)
    assert "\n" not in str(e.value)


def test_bad_size_in_architecture_function() -> None:
    for bad in (0, -1, 64.0, True, "64"):
        with pytest.raises(ValueError, match="positive integer"):
            models.resnet18(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sequence length"):
        models.bert_block_256(0)


def test_unknown_name_lists_the_shipped_ones() -> None:
    for spec in ("resnet50", "vgg16@224", "ResNet18"):
        with pytest.raises(ValueError) as e:
            load_model(spec)
        msg = str(e.value)
        assert "\n" not in msg and all(n in msg for n in model_names())
    with pytest.raises(ValueError, match="name or a path"):
        load_model(18)  # type: ignore[arg-type]


def good_doc() -> dict:
    return {"format": "tunedb-model", "version": 1, "name": "mine", "source": "hand-written", "input": {"batch": 1},
            "tasks": [{"name": "mm", "workload": {"family": "matmul", "M": 8, "N": 8, "K": 8}, "weight": 2,
                       "layers": ["a", "b"]},
                      {"name": "sm", "workload": {"family": "softmax", "M": 4, "N": 4}, "weight": 1}],
            "omitted": [{"name": "gelu", "count": 1}]}


def test_user_file_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(good_doc()))
    m = load_model(p)
    assert m.name == "mine" and m.tasks[0].weight == 2 and m.tasks[1].layers == ["sm"]
    assert load_model(str(p)) == m
    p.write_text(m.to_json())
    assert load_model(p) == m
    minimal = {"format": "tunedb-model", "version": 1, "name": "x",
               "tasks": [{"name": "t", "workload": {"family": "anything"}, "weight": 1}]}
    p.write_text(json.dumps(minimal))
    m = load_model(p)
    assert m.source == "" and m.input == {} and m.omitted == []
    # shipped files load through a path too
    assert load_model(models.SHIPPED_DIR / "resnet18.json") == load_model("resnet18")


def _drop_tasks(d: dict) -> None:
    del d["tasks"]


def _set(path: tuple, value: object):
    def edit(d: dict) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _del(path: tuple):
    def edit(d: dict) -> None:
        for k in path[:-1]:
            d = d[k]
        del d[path[-1]]
    return edit


BAD_EDITS = {
    "missing tasks": (_drop_tasks, "tasks"),
    "empty tasks": (_set(("tasks",), []), "tasks"),
    "weight 0": (_set(("tasks", 0, "weight"), 0), "weight"),
    "weight float": (_set(("tasks", 0, "weight"), 2.0), "weight"),
    "weight bool": (_set(("tasks", 0, "weight"), True), "weight"),
    "weight string": (_set(("tasks", 0, "weight"), "2"), "weight"),
    "dim float": (_set(("tasks", 0, "workload", "M"), 8.0), "integer"),
    "dim null": (_set(("tasks", 0, "workload", "M"), None), "integer"),
    "version float": (_set(("version",), 1.0), "version"),
    "version 2": (_set(("version",), 2), "version"),
    "unknown format": (_set(("format",), "tvm-log"), "format"),
    "no format": (_del(("format",)), "format"),
    "no family": (_del(("tasks", 0, "workload", "family")), "family"),
    "family not str": (_set(("tasks", 0, "workload", "family"), 3), "family"),
    "workload list": (_set(("tasks", 0, "workload"), [1, 2]), "workload"),
    "task not object": (_set(("tasks", 0), "mm"), "object"),
    "no task name": (_del(("tasks", 0, "name")), "name"),
    "duplicate task name": (_set(("tasks", 1, "name"), "mm"), "duplicate"),
    "layers not strings": (_set(("tasks", 0, "layers"), [1]), "layers"),
    "unknown task key": (_set(("tasks", 0, "flops"), 5), "unknown"),
    "unknown top key": (_set(("extra",), 1), "unknown"),
    "name empty": (_set(("name",), ""), "name"),
    "input not object": (_set(("input",), [1]), "input"),
    "omitted not list": (_set(("omitted",), {}), "omitted"),
    "omitted count 0": (_set(("omitted", 0, "count"), 0), "count"),
    "omitted count float": (_set(("omitted", 0, "count"), 1.0), "count"),
}


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_bad_files(tmp_path: Path, case: str) -> None:
    edit, word = BAD_EDITS[case]
    d = good_doc()
    edit(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        load_model(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and word in msg, msg


@pytest.mark.parametrize("text", ["not json", "", "[1, 2]", '{"format": "tunedb-model", "version": 1, "version": 1}',
                                  '{"format": "tunedb-model", "version": NaN}', "\"__import__('os')\"", "null"])
def test_not_a_model_file(tmp_path: Path, text: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_model(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        load_model(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="cannot read"):
        load_model(tmp_path)  # a directory
    p = tmp_path / "latin1.json"
    p.write_bytes(b'{"name": "\xe9"}')
    with pytest.raises(ValueError, match="cannot read"):
        load_model(p)


def test_datasets_module_does_not_import_transfer() -> None:
    code = ("import sys, tunedb.datasets.models as m; m.load_model('resnet18@64'); m.load_model('bert_block_256'); "
            "print(sorted(k for k in sys.modules if k.startswith('tunedb.transfer') or k in ('numpy', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_write_shipped_regenerates(tmp_path: Path) -> None:
    paths = models.write_shipped(tmp_path)
    assert [p.name for p in paths] == [f"{n}.json" for n in model_names()]
    for p in paths:
        assert p.read_text(encoding="utf-8") == (models.SHIPPED_DIR / p.name).read_text(encoding="utf-8")
