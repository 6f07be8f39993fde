"""Device identity from the driver (tunedb.index.hardware.devices, tunedb.transfer.tuners.kernel_tuner.strategy.driver_target).

The OpenCL path runs on the real PoCL device in tests/transfer_tests/integrations_tests/test_kt_live.py.  No CUDA or ROCm device
exists here, so the CUDA and HIP paths are fed what Kernel Tuner's backends hold after
initialising on such a device (their ``env`` and ``cc`` attributes, as kernel_tuner/backends/
nvcuda.py, cupy.py, pycuda.py and hip/hip.py build them), recorded from an H100 and an MI250X."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import tunedb
from tunedb.index.hardware import devices
from tunedb.transfer.tuners.kernel_tuner.strategy import driver_target


def runner_of(backend) -> SimpleNamespace:
    return SimpleNamespace(dev=SimpleNamespace(dev=backend))


def nvcuda(cuda_version: int = 12040, cc: str = "90") -> SimpleNamespace:
    env = {"device_name": "NVIDIA H100 80GB HBM3", "cuda_version": cuda_version, "compute_capability": cc,
           "iterations": 7, "compiler_options": [], "device_properties": "name: NVIDIA H100 80GB HBM3, ...",
           "pci_bus_id": "0000:19:00.0", "uuid": "6c3a0f5e-0000-0000-0000-000000000000"}
    return SimpleNamespace(cc=cc, env=env, name=env["device_name"])


def hip(driver: int = 60140831, arch: str = "gfx90a:sramecc+:xnack-") -> SimpleNamespace:
    props = {"name": "AMD Instinct MI250X", "gcnArchName": arch, "multiProcessorCount": 110,
             "totalGlobalMem": 68702699520, "maxThreadsPerBlock": 1024, "warpSize": 64}
    env = {"device_name": "AMD Instinct MI250X", "iterations": 7, "compiler_options": None, "pci_bus_id": 193,
           "hip_driver_version": driver, "hip_runtime_version": 60140831, "device_properties": props}
    return SimpleNamespace(env=env, name=env["device_name"])


def key(target: dict) -> str:
    return tunedb.Record(target, {"family": "f"}, {"x": 1}, [1.0]).target_key


def test_cuda_device_identity_comes_from_the_backend():
    t, _ = driver_target(runner_of(nvcuda()))
    assert (t["kind"], t["vendor"], t["runtime"], t["compute_capability"], t["driver"]) == \
        ("gpu", "nvidia", "cuda", "9.0", "12040")
    assert t["name"] == "NVIDIA H100 80GB HBM3"
    assert t["arch"] == "GH100"  # the catalog adds what the driver does not say
    # compute capability in each form Kernel Tuner's backends use
    for cc in ("90", (9, 0), "9.0"):
        assert devices.cuda_target("H100", cc)["compute_capability"] == "9.0"


def test_rocm_device_identity_comes_from_hip_properties():
    t, _ = driver_target(runner_of(hip()))
    assert (t["kind"], t["vendor"], t["runtime"], t["isa"], t["compute_units"], t["driver"]) == \
        ("gpu", "amd", "hip", "gfx90a", 110, "60140831")
    assert t["global_mem_mb"] == 68702699520 // 2**20
    assert devices.rocm_target("x", "not an arch").get("isa") is None


@pytest.mark.parametrize("make,changed", [(nvcuda, {"cuda_version": 12060}), (hip, {"driver": 60200000})])
def test_a_driver_change_is_another_target(make, changed):
    """Timings under another driver never mix with this one's: another target_key."""
    before, _ = driver_target(runner_of(make()))
    after, _ = driver_target(runner_of(make(**changed)))
    assert key(before) != key(after)
    again, _ = driver_target(runner_of(make()))
    assert key(before) == key(again)


def test_no_live_device_is_no_driver_target():
    assert driver_target(SimpleNamespace()) is None  # simulation mode: no backend
    assert driver_target(runner_of(SimpleNamespace(env={}))) is None  # a backend tunedb cannot ask
