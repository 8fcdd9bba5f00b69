"""Every module of the package imports on a CPU-only machine (and so under `make fast`, which
reaches a few plotting and report modules only through this test)."""

import importlib
import pkgutil

import pytest

import minipar

MODULES = sorted(m.name for m in pkgutil.walk_packages(minipar.__path__, "minipar."))
RANK_ONLY = {"minipar.runtime._rank"}  # the launcher's child: runs as a script, never imported


def test_the_package_has_its_chapters():
    for slug in (
        "collectives",
        "memory_time",
        "data_parallel",
        "tensor_parallel",
        "pipeline_parallel",
        "three_d",
        "context_parallel",
        "expert_parallel",
    ):
        assert f"minipar.{slug}" in MODULES and f"minipar.cost.{slug}" in MODULES, slug


@pytest.mark.parametrize("name", [m for m in MODULES if m not in RANK_ONLY])
def test_module_imports(name):
    importlib.import_module(name)
