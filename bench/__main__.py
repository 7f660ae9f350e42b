"""``python -m bench [--events N]`` (``make bench``): run the benchmarks and rewrite BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import speed_layer_rate
from infra.processes import ServiceError
from infra.settings import REPO
from serving_layer.cli import Parser

REPORT = REPO / "BENCHMARKS.md"


def _events(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of events, got {text!r}") from None
    if value < speed_layer_rate.MIN_EVENTS:
        raise argparse.ArgumentTypeError(
            f"at least {speed_layer_rate.MIN_EVENTS:,} events are needed to measure a rate, got {text}")
    return value


def _parser() -> Parser:
    parser = Parser(prog="python -m bench", description=__doc__)
    parser.add_argument("--events", type=_events, default=200_000,
                        help="events in the backlog the speed layer drains (default 200000: minutes on 2 cores)")
    return parser


def machine() -> str:
    """The machine, as ``nproc``, /proc/cpuinfo and /proc/meminfo describe it."""
    info = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 platform.processor() or "unknown")
    kib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:")))
    return (f"{len(os.sched_getaffinity(0))} CPUs (`nproc`), {model}; {kib / 2**20:.1f} GiB memory; "
            f"{platform.system()} {platform.release()}; Python {platform.python_version()}")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _command(argv: list[str]) -> str:
    if os.environ.get("MAKELEVEL") and not argv:
        return "make bench"
    return shlex.join(["PYTHONPATH=.", os.path.relpath(sys.executable, REPO), "-m", "bench", *argv])


def _method(doc: str | None) -> str:
    """A benchmark's docstring after its summary line, as Markdown."""
    return (doc or "").split("\n", 1)[-1].strip().replace("``", "`")


def render(result: speed_layer_rate.Result, command: str, date: str, load: tuple[str, str],
           seconds: float) -> str:
    table = ["| metric | value | baseline | ratio |", "|---|---|---|---|",
             *(f"| {' | '.join(row)} |" for row in result.rows())]
    return "\n".join([
        "# Benchmarks",
        "",
        "Written by `make bench` (`bench/`); every figure is compared with a baseline measured in the same run.",
        "",
        "## Speed layer sustained rate",
        "",
        _method(speed_layer_rate.__doc__),
        "",
        *table,
        "",
        *(f"- {note}" for note in result.notes()),
        "",
        "## Run",
        "",
        f"- Command: `{command}`",
        f"- Date: {date}, {seconds / 60:.1f} min in all",
        f"- Machine: {machine()}",
        f"- Load average (1, 5, 15 min) before the run: {load[0]}; after: {load[1]} "
        "(above the CPU count, other work competed for the cores)",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    date, before, began = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), _load(), time.monotonic()
    try:
        result = speed_layer_rate.run(args.events)
    except (ServiceError, RuntimeError, TimeoutError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    REPORT.write_text(render(result, _command(argv), date, (before, _load()), time.monotonic() - began))
    for metric, value, baseline, ratio in result.rows():
        print(f"{metric}: {value} (baseline {baseline}, ratio {ratio})")
    print(f"wrote {REPORT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
