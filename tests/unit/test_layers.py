"""Batch and serving share their state (the ledger, the version pointers, the merge) through ``lake``,
below both: no layer imports another, and neither ``lake`` nor ``infra`` (below every layer) imports a
layer or an entry point."""

import ast

import pytest

from infra.deployment import REPO

LAYERS = ("batch_layer", "serving_layer", "speed_layer")


def _imports(package: str) -> set[str]:
    """The top-level packages that the modules of ``package`` import (deferred imports too)."""
    found = set()
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_another(layer):
    assert _imports(layer).isdisjoint(set(LAYERS) - {layer})


@pytest.mark.parametrize("layer", ["batch_layer", "serving_layer"])
def test_batch_and_serving_share_the_lake(layer):
    assert "lake" in _imports(layer)


@pytest.mark.parametrize("below", ["lake", "infra"])
def test_what_is_below_the_layers_imports_none(below):
    assert _imports(below).isdisjoint({*LAYERS, "lambdalake", "dags", "bench"})
