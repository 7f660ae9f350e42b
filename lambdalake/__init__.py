"""The platform's entry points: the command line (``lambdalake``, :mod:`lambdalake.cli`), the demo,
and what the command line does with dead letters (list, replay, correct)."""
