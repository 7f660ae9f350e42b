"""The bundled example domains, one package each: ``domains.<name>`` declares ``DOMAIN`` (its source
and dimensions, :class:`views.source.Domain`) and holds its views (``domains.<name>.views``) and its
generator. A deployment computes over one, named by the ``domain`` setting."""

import importlib


def generator(name: str):
    """The generator module of the bundled domain ``name``: ``generate(start, end, count, seed, mix,
    shaped)`` of its events and ``changelogs(start, end, seed)`` of its dimensions, by name."""
    return importlib.import_module(f"domains.{name}.generator")
