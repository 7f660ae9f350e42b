"""What is computed: the event schema and one module per view, each declaring ``VIEW``.

Adding a view is adding a module here; :func:`all_views` finds it.
"""

from __future__ import annotations

import importlib
import pkgutil

from views.model import View

_NOT_VIEWS = {"model", "events", "compile", "timebase"}


def all_views() -> dict[str, View]:
    """Every view declared in this package, by name."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_VIEWS:
            view = importlib.import_module(f"views.{info.name}").VIEW
            found[view.name] = view
    return dict(sorted(found.items()))


def get(name: str) -> View:
    views = all_views()
    if name not in views:
        raise KeyError(f"unknown view {name!r}; known views: {', '.join(views)}")
    return views[name]
