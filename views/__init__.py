"""How views are declared and computed: the vocabulary (``model``, ``source``), the Spark code that
compiles declarations (``compile``, ``events``, ``changelog``), and where a deployment's views are found.

A domain (``domains.<name>``) declares its source and dimensions and holds one module per view, each
declaring ``VIEW``. Adding a view is adding a module there (or, for a deployment's own views, naming its
module in the ``view_modules`` setting); :func:`all_views` finds it, and every layer takes its views
from there.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from views.model import View
from views.source import Domain

#: The domain a deployment computes over unless its ``domain`` setting names another.
DEFAULT_DOMAIN = "clickstream"


def domain(name: str = DEFAULT_DOMAIN) -> Domain:
    """The bundled domain ``name`` (``domains.<name>.DOMAIN``)."""
    try:
        declared = importlib.import_module(f"domains.{name}").DOMAIN
    except (ModuleNotFoundError, AttributeError):
        known = [info.name for info in pkgutil.iter_modules(importlib.import_module("domains").__path__) if info.ispkg]
        raise ValueError(f"unknown domain {name!r} (setting domain); known: {', '.join(known)}") from None
    return declared


def all_views(extra_modules: Iterable[str] = (), domain_name: str = DEFAULT_DOMAIN) -> dict[str, View]:
    """Every view of domain ``domain_name`` and of ``extra_modules``, by name."""
    extra_modules = tuple(extra_modules)
    package = importlib.import_module(f"domains.{domain(domain_name).name}.views")
    modules = [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
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
