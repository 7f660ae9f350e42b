"""Every public function of the platform is typed, its parameters and its return, so that mypy (run by
``make lint``) checks its callers: module-level functions and the methods of public classes whose names
do not start with ``_`` (``__init__`` included; like mypy, an ``__init__`` with typed parameters may
leave out its ``-> None``)."""

import ast
from collections.abc import Iterator

import pytest

from infra.deployment import REPO

PACKAGES = (
    "batch_layer",
    "bench",
    "dags",
    "domains",
    "infra",
    "lake",
    "lambdalake",
    "serving_layer",
    "speed_layer",
    "views",
)
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _public(module: ast.Module) -> Iterator[Function]:
    for node in module.body:
        if isinstance(node, Function) and not node.name.startswith("_"):
            yield node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from (
                method
                for method in node.body
                if isinstance(method, Function) and (not method.name.startswith("_") or method.name == "__init__")
            )


def _untyped(function: Function) -> list[str]:
    """What ``function`` leaves untyped: its parameters' names, and ``return``."""
    given = function.args
    parameters = [*given.posonlyargs, *given.args, *given.kwonlyargs, *filter(None, (given.vararg, given.kwarg))]
    untyped = [p.arg for p in parameters if p.annotation is None and p.arg not in ("self", "cls")]
    typed_init = function.name == "__init__" and len(parameters) > len(untyped) + 1
    return untyped + (["return"] if function.returns is None and not typed_init else [])


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_function_is_typed(package):
    found = [
        f"{path.relative_to(REPO)}:{function.lineno} {function.name}: {', '.join(untyped)}"
        for path in sorted((REPO / package).rglob("*.py"))
        for function in _public(ast.parse(path.read_text()))
        if (untyped := _untyped(function))
    ]
    assert found == []


def test_an_untyped_function_is_found():
    module = ast.parse("def f(a, b: int): pass\nclass C:\n    def __init__(self): pass\n    def g(self) -> int: ...")
    assert [(f.name, _untyped(f)) for f in _public(module)] == [
        ("f", ["a", "return"]),
        ("__init__", ["return"]),
        ("g", []),
    ]
