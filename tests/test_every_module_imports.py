"""Every module of the package imports on a CPU-only machine (and so under `make fast`, which
reaches a few plotting and report modules only through this test)."""

import importlib
import pkgutil

import pytest

import minipar
from minipar import chapters

MODULES = sorted(m.name for m in pkgutil.walk_packages(minipar.__path__, "minipar."))
RANK_ONLY = {"minipar.runtime._rank"}  # the launcher's child: runs as a script, never imported


def test_the_package_has_its_chapters():
    for chapter in chapters.CHAPTERS:
        assert f"minipar.{chapter.slug}" in MODULES, chapter.slug
        assert chapter.cost_module in MODULES, chapter.cost_module


@pytest.mark.parametrize("name", [m for m in MODULES if m not in RANK_ONLY])
def test_module_imports(name):
    importlib.import_module(name)
