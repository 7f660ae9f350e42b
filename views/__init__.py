"""What is computed: the event schemas and one module per view, each declaring ``VIEW``.

Adding a view is adding a module here (or, for a deployment's own views, naming its module in the
``view_modules`` setting); :func:`all_views` finds it, and every layer takes its views from there.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable

from views.model import View

#: The package's modules that declare no view: the vocabulary, and the Spark code that compiles views,
#: which readers and DAG files must not import.
SUPPORT_MODULES = frozenset({"compile", "event_fields", "events", "model", "products", "timebase"})


def all_views(extra_modules: Iterable[str] = ()) -> dict[str, View]:
    """Every view declared in this package and in ``extra_modules``, by name."""
    extra_modules = tuple(extra_modules)
    modules = [f"views.{info.name}" for info in pkgutil.iter_modules(__path__)
               if info.name not in SUPPORT_MODULES] + list(extra_modules)
    found = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise ValueError(f"cannot import view module {name} (setting view_modules): {exc}") from None
        view = getattr(module, "VIEW", None)
        if isinstance(view, View):
            if view.name in found:
                raise ValueError(f"two views are named {view.name!r}; the one in {name} needs another name")
            found[view.name] = view
        elif name in extra_modules:
            raise ValueError(f"module {name} (setting view_modules) declares no VIEW")
    return dict(sorted(found.items()))


def get(name: str, extra_modules: Iterable[str] = ()) -> View:
    views = all_views(extra_modules)
    if name not in views:
        raise KeyError(f"unknown view {name!r}; known views: {', '.join(views)}")
    return views[name]
