"""Hardware and workload feature vectors: layout, determinism, presets, weighting."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tunedb.index.hardware.localcpu import preset, preset_names
from tunedb.index.retrieval import features as F

NUM0 = len(F.HW_KINDS) + len(F.HW_VENDORS) + len(F.HW_FAMILIES)


def _slot(name: str) -> int:
    return NUM0 + [n for n, _ in F.HW_NUMERIC].index(name)


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_layout_sizes():
    assert F.HW_DIM == len(F.HW_KINDS) + len(F.HW_VENDORS) + len(F.HW_FAMILIES) + len(F.HW_NUMERIC)
    assert F.DIM == F.HW_DIM + F.WL_DIM
    assert isinstance(F.FEATURE_VERSION, int)
    v = F.hardware_vector({"kind": "gpu", "name": "NVIDIA A100-PCIE-40GB"})
    assert v.shape == (F.HW_DIM,) and v.dtype == np.float32 and np.isfinite(v).all()
    assert v[F.HW_KINDS.index("gpu")] == 1.0
    assert v[len(F.HW_KINDS) + F.HW_VENDORS.index("nvidia")] == pytest.approx(F.HW_VENDOR_WEIGHT)
    assert v[len(F.HW_KINDS) + len(F.HW_VENDORS) + F.HW_FAMILIES.index("ampere")] == 1.0


def test_vector_bits_slot_encodes_the_documented_formula():
    v = F.hardware_vector({"kind": "gpu", "name": "NVIDIA A100-PCIE-40GB"})
    ref = dict(F.HW_NUMERIC)["fp32_gflops"]
    assert v[_slot("fp32_gflops")] == pytest.approx(2 * math.log2(1 + 19500) / math.log2(1 + ref) - 1, abs=1e-6)


def test_presets_embed_from_their_own_fields():
    names = preset_names()
    vs = {n: F.hardware_vector(preset(n)) for n in names}
    for n, v in vs.items():
        t = preset(n)
        ref = dict(F.HW_NUMERIC)["vector_bits"]
        assert v[_slot("vector_bits")] == pytest.approx(2 * math.log2(1 + t["vector_bits"]) / math.log2(1 + ref) - 1,
                                                        abs=1e-6)
        assert v[F.HW_KINDS.index("cpu")] == 1.0
    # the -march level changes the vector, the thread count too
    assert not np.allclose(vs["cpu-x86-64-v3-t1"], vs["cpu-x86-64-t1"])
    if len(names) > 4:
        assert not np.allclose(vs["cpu-native-t1"], vs[names[1]])
    prof = F.hardware_profile(preset("cpu-native-t1"))
    assert prof["values"]["threads"] == 1 and prof["values"]["cores"] == preset("cpu-native-t1")["cores"]


def test_similar_devices_are_closer_than_unlike_ones():
    a100 = F.hardware_vector({"name": "NVIDIA A100-PCIE-40GB"})
    a6000 = F.hardware_vector({"name": "NVIDIA RTX A6000"})
    nano = F.hardware_vector({"name": "Jetson Nano"})
    rpi = F.hardware_vector({"target": "llvm -device=arm_cpu -model=bcm2837"})
    assert _cos(a100, a6000) > _cos(a100, nano) > _cos(a100, rpi)


def test_target_dict_shapes_from_importers_resolve():
    tvm = F.hardware_profile({"target": "cuda -model=titanx"})
    ms = F.hardware_profile({"kind": "llvm", "mcpu": "znver4", "num-cores": 2, "keys": ["cpu"]})
    assert tvm["device"] == "NVIDIA TITAN X (Pascal)"
    assert ms["device"] == "AMD EPYC 9654" and ms["values"]["threads"] == 2


def test_unknown_device_warns_and_still_embeds():
    t = {"kind": "gpu", "name": f"Frobnicator X1 unique-{os.getpid()}"}
    with pytest.warns(UserWarning, match="matches no hardware catalog device"):
        v = F.hardware_vector(t)
    assert v[F.HW_KINDS.index("gpu")] == 1.0 and np.isfinite(v).all()
    assert np.count_nonzero(v[NUM0:]) > 5  # imputed from catalog medians of its kind


def test_workload_family_one_hot_and_hashed_buckets():
    base = len(F.WL_FAMILIES)
    v = F.workload_vector({"family": "matmul", "M": 4, "N": 4, "K": 4})
    assert v[F.WL_FAMILIES.index("matmul")] == F.WL_FAMILY_WEIGHT
    assert not v[base:base + F.WL_FAMILY_BUCKETS].any()
    u = F.workload_vector({"family": "my_imported_kernel", "x": 3})
    assert not u[:base].any()
    assert np.count_nonzero(u[base:base + F.WL_FAMILY_BUCKETS]) == 1
    assert F.canonical_family("conv2d_nchw_winograd.cuda") == "conv2d_winograd"
    assert F.canonical_family("depthwise_conv2d_nchw.arm_cpu") == "depthwise_conv2d"
    assert F.canonical_family("conv2d_NCHWc.x86") == "conv2d"


def test_hash_buckets_are_stable_across_processes():
    code = ("import json,sys; from tunedb.index.retrieval import features as F; "
            "print(json.dumps(F.workload_vector({'family':'zz_kernel','kernel':'k1','n':7}).tolist()))")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                check=True).stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop()) == pytest.approx(
        F.workload_vector({"family": "zz_kernel", "kernel": "k1", "n": 7}).tolist())


def test_workload_flops_bytes_intensity():
    f = F.workload_features({"family": "matmul", "M": 512, "N": 256, "K": 128, "dtype": "float16"})
    assert f["flops"] == 2 * 512 * 256 * 128
    assert f["bytes"] == 2 * (512 * 128 + 128 * 256 + 512 * 256)
    assert f["intensity"] == pytest.approx(f["flops"] / f["bytes"])
    assert f["dtype_bytes"] == 2
    tvm = F.workload_features({"family": "conv2d_nchw.cuda", "args": [
        ["TENSOR", [1, 64, 56, 56], "float32"], ["TENSOR", [128, 64, 3, 3], "float32"], [1, 1], [1, 1, 1, 1]]})
    assert tvm["family"] == "conv2d" and tvm["shape"][:7] == [1, 64, 56, 56, 128, 3, 3]
    assert tvm["flops"] == pytest.approx(2 * 128 * 56 * 56 * 64 * 9)
    with pytest.raises(ValueError):
        F.workload_vector({"M": 3})


def test_shape_similarity_orders_by_size():
    q = F.workload_vector({"family": "matmul", "M": 512, "N": 512, "K": 512})
    near = F.workload_vector({"family": "matmul", "M": 1024, "N": 1024, "K": 1024})
    far = F.workload_vector({"family": "matmul", "M": 16, "N": 16, "K": 16})
    other = F.workload_vector({"family": "conv2d", "N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3})
    assert _cos(q, near) > _cos(q, far) > _cos(q, other)


@pytest.mark.parametrize("w_hw", [0.0, 0.25, 0.5, 0.8, 1.0])
def test_query_vector_gives_weighted_cosines(w_hw):
    rng = np.random.default_rng(0)
    for _ in range(20):
        h1, h2 = rng.normal(size=F.HW_DIM), rng.normal(size=F.HW_DIM)
        w1, w2 = rng.normal(size=F.WL_DIM), rng.normal(size=F.WL_DIM)
        e = F.entry_vector(h2, w2)
        assert np.linalg.norm(e) == pytest.approx(1.0, abs=1e-5)
        q = F.query_vector(h1, w1, w_hw, 1 - w_hw)
        want = w_hw * _cos(h1, h2) + (1 - w_hw) * _cos(w1, w2)
        assert float(q @ e) == pytest.approx(want, abs=1e-5)
    # default weights: exactly the cosine of the two entry vectors
    e1, e2 = F.entry_vector(h1, w1), F.entry_vector(h2, w2)
    assert float(F.query_vector(h1, w1) @ e2) == pytest.approx(_cos(e1, e2), abs=1e-5)


def test_normalized_does_not_modify_input():
    x = np.arange(5, dtype=np.float64)
    y = F.normalized(x)
    assert x.tolist() == [0, 1, 2, 3, 4] and y.dtype == np.float32 and y.flags.c_contiguous
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not F.normalized(np.zeros(3)).any()
