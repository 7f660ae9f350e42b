"""Background services: start with a pid file and a log file, health-check, stop with nothing left."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import psutil
import tenacity

from infra.deployment import Deployment

T = TypeVar("T")
#: Where a long operation reports its progress, a line at a time (``print`` by default).
Say = Callable[[str], object]
#: glibc's malloc arenas for a long-lived service with many threads (the batch engine's gRPC, Spark and
#: Delta threads; the HTTP API's request threads; the speed layer's fold and commit threads): two, not
#: eight per core, each keeping memory of its own that a long-lived process never gives back.
FEW_ARENAS = {"MALLOC_ARENA_MAX": "2"}
#: glibc's ``malloc_trim``, if the process has it (None with another C library).
_MALLOC_TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim", None)


def give_back_freed() -> None:
    """Give the memory that malloc holds free back to the system (a no-op without glibc)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@dataclass(frozen=True)
class Service:
    """A service as ``status`` reports it: its process (None: not running), whether it answers, and
    where (a URL, if it serves one)."""

    pid: int | None
    healthy: bool
    url: str | None = None
    running: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "running", self.pid is not None)


class ServiceError(RuntimeError):
    """A service could not be started or stopped; the message says why and what to do."""


def parse_utc(stamp: str) -> float:
    """Seconds since the epoch of an ISO 8601 UTC stamp such as ``2026-11-22T07:50:32.964Z``."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def pid_file(settings: Deployment, name: str) -> Path:
    return settings.run / f"{name}.pid"


def log_file(settings: Deployment, name: str) -> Path:
    return settings.logs / f"{name}.log"


def running_pid(settings: Deployment, name: str) -> int | None:
    """The pid of service ``name`` if its process is alive, else None: then the stale pid file is
    removed, and whatever the dead process's group left running (:func:`_left_behind`) is killed."""
    path = pid_file(settings, name)
    try:
        pid_text, created_text = path.read_text().split()[:2]
        pid, created = int(pid_text), float(created_text)
    except (FileNotFoundError, ValueError):
        path.unlink(missing_ok=True)
        return None
    try:
        proc = psutil.Process(pid)
        ours = abs(proc.create_time() - created) < 1
        if ours and proc.status() != psutil.STATUS_ZOMBIE:
            return pid
    except psutil.NoSuchProcess:
        ours = True
    if ours:
        _kill(_left_behind(pid))
    path.unlink(missing_ok=True)
    return None


def _left_behind(group: int) -> list[psutil.Process]:
    """The processes left in the process group of a service's dead leader, with their children (of
    Airflow's scheduler: its executor's workers and the tasks they run, each in a group of its own;
    docs/architecture.md says why they must go). A pid is not reused while a process group of that
    number lives: every member is the service's."""
    members = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != group and os.getpgid(proc.pid) == group:
                members += [proc, *proc.children(recursive=True)]
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def port_holder(port: int) -> str | None:
    """Describe what listens on 127.0.0.1:``port``, or None if the port is free."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline())[:120]})"
            except psutil.NoSuchProcess:
                break
    return "another process"


def require_free(port: int, purpose: str) -> None:
    holder = port_holder(port)
    if holder:
        raise ServiceError(
            f"port {port} ({purpose}) is busy, held by {holder}; stop it or set another port in "
            f"$LAMBDALAKE_HOME/settings.json"
        )


def start(
    settings: Deployment,
    name: str,
    argv: Sequence[str],
    env: dict | None = None,
    cwd: Path | None = None,
    **popen: Any,
) -> int:
    """Start ``argv`` in its own process group, logging to ``logs/<name>.log``; return its pid.
    ``popen``: more arguments of :class:`subprocess.Popen` (``user``, ``group``: another user's process).
    The log, and every file the process creates, is its owner's alone (umask 077): a log may show a
    secret, and the tables and checkpoints are the deployment's data."""
    settings.run.mkdir(parents=True, exist_ok=True)
    settings.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    with os.fdopen(os.open(log_file(settings, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            **{"umask": 0o077, **popen},
        )
    created = psutil.Process(proc.pid).create_time()
    pid_file(settings, name).write_text(f"{proc.pid} {created}\n")
    return proc.pid


def poll(attempt: Callable[[], T | None], timeout: float, every: float, timed_out: Callable[[], Exception]) -> T:
    """What ``attempt`` returns once it returns something other than None, tried every ``every``
    seconds; ``timed_out()`` is raised after ``timeout`` seconds, and an exception of ``attempt``'s
    own ends the wait at once."""

    def give_up(_state: tenacity.RetryCallState):
        raise timed_out()

    # every None is retried and give_up raises: what comes back is a T
    return cast(
        T,
        tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout),
            wait=tenacity.wait_fixed(every),
            retry=tenacity.retry_if_result(lambda result: result is None),
            retry_error_callback=give_up,
        )(attempt),
    )


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    log: Path | None = None,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Poll ``check`` until it is true; fail with the log's tail if ``alive`` goes false or time runs out."""

    def healthy() -> bool | None:
        if check():
            return True
        if not alive():
            raise ServiceError(f"{what} exited during start-up{log_tail(log)}")
        return None

    poll(healthy, timeout, 0.5, lambda: ServiceError(f"{what} not healthy after {timeout:.0f}s{log_tail(log)}"))


def log_tail(log: Path | None, lines: int = 15) -> str:
    """The last ``lines`` of ``log``, formatted to end an error message (empty if there is no log)."""
    if not log or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"; last lines of {log}:\n  " + "\n  ".join(text)


def stop(settings: Deployment, name: str, timeout: float = 30) -> bool:
    """Stop service ``name`` and every process of its group; True if something was running."""
    pid = running_pid(settings, name)
    if pid is None:
        return False
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    pid_file(settings, name).unlink(missing_ok=True)
    return True
