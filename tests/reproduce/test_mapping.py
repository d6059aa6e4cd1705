"""Each system of the figures mapped onto the real engine, and what a point's cache identity holds."""

from __future__ import annotations

import dataclasses

import pytest

from hipress.reproduce import RealCache, RunSpec, run_spec
from hipress.reproduce.runner import RealRunner
from hipress.reproduce.settings import RealSettings
from hipress.sim.experiments import Point
from hipress.train.config import make_config


@pytest.mark.parametrize("system,alg,rate,want", [
    ("byteps", "onebit", None, RunSpec("ps", "none")),
    ("ring", "dgc", None, RunSpec("allreduce", "none")),
    ("ring-dgc", "dgc", None, RunSpec("allgather", "dgc")),
    ("ring-dgc", "dgc", 0.05, RunSpec("allgather", "dgc:ratio=0.05")),
    ("casync-ring", "dgc", None, RunSpec("ring", "dgc", plan="secopa")),
    ("casync-ps", "onebit", None, RunSpec("ps", "onebit:block=0", plan="secopa")),  # the paper's onebit
    ("casync-ps", "dgc", 0.001, RunSpec("ps", "dgc:ratio=0.001", plan="secopa")),
    ("byteps-onebit", "onebit", None, RunSpec("ps", "onebit:block=0", plan="whole", overlap=False, bulk_bytes=0)),
    ("linear", "onebit", None, None),
])
def test_every_system_has_its_engine_options(system, alg, rate, want):
    spec = run_spec(system, alg, rate)
    assert spec == want
    if spec is not None:  # and hipress run accepts them
        cfg = make_config("mlp", spec.topo, spec.alg, 2, 1, overlap=spec.overlap, bulk_bytes=spec.bulk_bytes)
        assert cfg.overlap == spec.overlap and cfg.bulk_bytes == spec.bulk_bytes


def test_figure11_switches():
    off = run_spec("casync-ps", "onebit", pipeline=False, bulk=False, secopa=False)
    assert off == RunSpec("ps", "onebit:block=0", plan="default", overlap=False, bulk_bytes=0)
    assert run_spec("casync-ps", "onebit", pipeline=True, bulk=True, secopa=False).plan == "default"
    assert run_spec("casync-ps", "onebit", pipeline=True, bulk=False, secopa=False).bulk_bytes == 0
    # the on-CPU step (CaSync-PS, codec on the CPU): every gradient whole, as BytePS's onebit runs here
    on_cpu = run_spec("casync-ps", "onebit", pipeline=False, bulk=False, secopa=False, gpu_codec=False)
    assert on_cpu == run_spec("byteps-onebit", "onebit")


def test_bad_mappings_are_refused():
    with pytest.raises(ValueError, match="no real-engine mapping"):
        run_spec("horovod-fp16", "none")
    with pytest.raises(ValueError, match="dgc only"):
        run_spec("casync-ps", "onebit", 0.1)
    with pytest.raises(ValueError, match="needs an algorithm"):
        run_spec("casync-ring", None)


def _identity_of(settings: RealSettings, rate: str):
    r = RealRunner.__new__(RealRunner)  # identity only: no cluster, no root needed
    r.settings, r.rate = settings, rate
    return r.identity


def test_the_cache_key_holds_rate_hosts_and_sizes(tmp_path):
    s = RealSettings((1, 2), 2, 1, ("resnet50",), (0.01,), {"resnet50": {"batch_size": 2, "input_size": 32}})
    p = Point(7, "emulated-1gbit", "resnet50", "byteps", 2)
    base = RealCache(tmp_path, _identity_of(s, "1gbit")).path(p)
    assert base.name.startswith("resnet50-byteps-2h-ps-none")
    others = [
        RealCache(tmp_path, _identity_of(s, "10gbit")).path(p),
        RealCache(tmp_path, _identity_of(s, "1gbit")).path(dataclasses.replace(p, gpus=1)),
        RealCache(tmp_path, _identity_of(dataclasses.replace(
            s, models={"resnet50": {"batch_size": 4, "input_size": 32}}), "1gbit")).path(p),
        RealCache(tmp_path, _identity_of(dataclasses.replace(s, iters=3), "1gbit")).path(p),
    ]
    assert len({base, *others}) == 5
    # figure 8's and figure 11's byteps point at the same size is the same measurement as figure 7's
    same = dataclasses.replace(p, figure=11, step="default")
    assert RealCache(tmp_path, _identity_of(s, "1gbit")).path(same) == base
