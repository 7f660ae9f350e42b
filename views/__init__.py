"""How views are declared and computed: the vocabulary (``model``, ``source``), the Spark code that
compiles declarations (``compile``, ``events``, ``changelog``), and where a deployment's views are found.

A domain (a bundled ``domains.<name>``, or a deployment's own package or folder: :func:`package`)
declares its source and dimensions and holds one module per view in its ``views``, each declaring
``VIEW``, and may hold a sample-data generator (:func:`generator`). Adding a view is adding a module
there (or, for a deployment's own views, naming its module in the ``view_modules`` setting);
:func:`all_views` finds it, and every layer takes its views from there.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from views.model import View
from views.source import Domain

#: The domain a deployment computes over unless its ``domain`` setting names another.
DEFAULT_DOMAIN = "clickstream"


def package(name: str = DEFAULT_DOMAIN) -> ModuleType:
    """The package declaring domain ``name`` (the ``domain`` setting): a bundled domain
    (``domains.<name>``), any importable package (``acme.events``), or a folder holding one, named by
    its absolute path (``/srv/acme_events``, ``~/acme_events``), which need not be importable."""
    if "/" in name or name.startswith("~"):
        folder = Path(name).expanduser()
        if not folder.is_absolute():  # every process of the deployment (Airflow's too) resolves it alike
            raise ValueError(f"domain folder {name!r} (setting domain): name it by its absolute path")
        return _folder(folder.resolve())
    for candidate in (f"domains.{name}", name):
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError as missing:  # the candidate itself, not a module it imports
            if not missing.name or not (candidate + ".").startswith(missing.name + "."):
                raise
    bundled = [info.name for info in pkgutil.iter_modules(importlib.import_module("domains").__path__) if info.ispkg]
    raise ValueError(
        f"unknown domain {name!r} (setting domain): a bundled one ({', '.join(bundled)}), an "
        f"importable package, or the path of a folder declaring DOMAIN in its __init__.py"
    )


def _folder(folder: Path) -> ModuleType:
    """The domain package in ``folder``, imported under the folder's name (once per process)."""
    name, init = folder.name, folder / "__init__.py"
    if not init.is_file():
        raise ValueError(f"domain folder {folder} (setting domain) has no __init__.py declaring DOMAIN")
    loaded = sys.modules.get(name)
    if loaded is not None and Path(loaded.__file__ or "").resolve() == init:
        return loaded
    if not name.isidentifier() or loaded is not None or importlib.util.find_spec(name) is not None:
        raise ValueError(
            f"domain folder {folder} (setting domain): its name {name!r} must be a Python "
            f"identifier that no installed module has; rename the folder"
        )
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def domain(name: str = DEFAULT_DOMAIN) -> Domain:
    """Domain ``name``'s declaration (its package's ``DOMAIN``, :func:`package`)."""
    declared = getattr(package(name), "DOMAIN", None)
    if not isinstance(declared, Domain):
        raise ValueError(f"domain {name!r} (setting domain) declares no DOMAIN (a views.source.Domain)")
    return declared


def generator(name: str = DEFAULT_DOMAIN) -> ModuleType:
    """The sample-data generator of domain ``name`` (its module ``generator``): ``generate(start, end,
    count, seed, mix, shaped)`` of its events and ``changelogs(start, end, seed)`` of its dimensions, by name."""
    if not has_generator(name):
        raise ValueError(
            f"domain {name} has no sample-data generator (a module generator beside its views): "
            f"send its events with `lambdalake produce --from-file F`"
        )
    return importlib.import_module(f"{package(name).__name__}.generator")


def has_generator(name: str = DEFAULT_DOMAIN) -> bool:
    """Whether domain ``name`` has a sample-data generator."""
    return importlib.util.find_spec(f"{package(name).__name__}.generator") is not None


def all_views(extra_modules: Iterable[str] = (), domain_name: str = DEFAULT_DOMAIN) -> dict[str, View]:
    """Every view of domain ``domain_name`` and of ``extra_modules``, by name."""
    extra_modules = tuple(extra_modules)
    declared = importlib.import_module(f"{package(domain_name).__name__}.views")
    modules = [f"{declared.__name__}.{info.name}" for info in pkgutil.iter_modules(declared.__path__)]
    found = {}
    for name in modules + list(extra_modules):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise ValueError(f"cannot import view module {name} (setting view_modules): {exc}") from None
        view = getattr(module, "VIEW", None)
        if isinstance(view, View):
            if view.name in found:
                raise ValueError(f"two views are named {view.name!r}; the one in {name} needs another name")
            found[view.name] = view
        else:
            raise ValueError(f"module {name}{' (setting view_modules)' * (name in extra_modules)} declares no VIEW")
    return dict(sorted(found.items()))


def get(name: str, extra_modules: Iterable[str] = (), domain_name: str = DEFAULT_DOMAIN) -> View:
    """View ``name`` of domain ``domain_name`` or of ``extra_modules``."""
    views = all_views(extra_modules, domain_name)
    if name not in views:
        raise KeyError(f"unknown view {name!r}; known views: {', '.join(views)}")
    return views[name]
