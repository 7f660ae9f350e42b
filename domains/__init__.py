"""The bundled example domains, one package each: ``domains.<name>`` declares ``DOMAIN`` (its source
and dimensions, :class:`views.source.Domain`) and holds its views (``domains.<name>.views``) and its
generator. A deployment computes over one, named by the ``domain`` setting, or over a package or folder
of its own laid out the same way (``views.package``; ``lambdalake new-domain`` writes one), whose
generator is optional (``views.generator``)."""
