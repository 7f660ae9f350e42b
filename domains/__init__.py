"""The bundled example domains, one package each: ``domains.<name>`` declares ``DOMAIN`` (its source
and dimensions, :class:`views.source.Domain`) and holds its views (``domains.<name>.views``) and its
generator. A deployment computes over one, named by the ``domain`` setting, or over a package or folder
of its own laid out the same way (``views.package``; ``lambdalake new-domain`` writes one), whose
generator is optional."""

import importlib
import importlib.util
from types import ModuleType

from views import package


def generator(name: str) -> ModuleType:
    """The sample-data generator of domain ``name`` (its module ``generator``): ``generate(start, end,
    count, seed, mix, shaped)`` of its events and ``changelogs(start, end, seed)`` of its dimensions, by name."""
    if not has_generator(name):
        raise ValueError(f"domain {name} has no sample-data generator (a module generator beside its views): "
                         f"send its events with `lambdalake produce --from-file F`")
    return importlib.import_module(f"{package(name).__name__}.generator")


def has_generator(name: str) -> bool:
    """Whether domain ``name`` has a sample-data generator."""
    return importlib.util.find_spec(f"{package(name).__name__}.generator") is not None
