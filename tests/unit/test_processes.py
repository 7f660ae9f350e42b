"""A service is its process group: what its dead leader left running is killed once it is found dead; its log
and its files are its owner's alone."""

import os
import sys

import psutil
import pytest

from infra import processes
from infra.deployment import load

#: A leader that starts a worker in its group, which runs a task in a session of its own (as Airflow's
#: scheduler's executor workers run tasks), prints their pids and exits; they end within a minute anyway.
LEADER = """
import subprocess, sys
worker = ("import subprocess, time; "
          "print(subprocess.Popen(['sleep', '60'], start_new_session=True).pid, flush=True); time.sleep(60)")
print(subprocess.Popen([sys.executable, "-c", worker]).pid, flush=True)
"""


@pytest.mark.processes
def test_what_a_dead_leader_left_running_is_killed_once_it_is_found_dead(tmp_path):
    settings = load(tmp_path)
    leader = psutil.Process(processes.start(settings, "leader", [sys.executable, "-c", LEADER]))
    leader.wait(timeout=30)
    log = processes.log_file(settings, "leader")

    def printed() -> list[int] | None:
        pids = log.read_text().split()
        return [int(pid) for pid in pids] if len(pids) == 2 else None

    left = [psutil.Process(pid) for pid in processes.poll(printed, 30, 0.1, lambda: AssertionError(log.read_text()))]
    assert all(proc.is_running() for proc in left)
    assert processes.running_pid(settings, "leader") is None
    assert not any(proc.is_running() for proc in left)
    assert not processes.pid_file(settings, "leader").exists()


@pytest.mark.processes
def test_a_service_s_log_and_files_are_its_owner_s_alone_whatever_the_umask(tmp_path):
    settings, old = load(tmp_path), os.umask(0)
    try:
        made = tmp_path / "made"
        pid = processes.start(settings, "writer", [sys.executable, "-c", f"open({str(made)!r}, 'w').write('x')"])
        psutil.Process(pid).wait(timeout=30)
    finally:
        os.umask(old)
    modes = [path.stat().st_mode & 0o777 for path in (settings.logs, processes.log_file(settings, "writer"), made)]
    assert modes == [0o700, 0o600, 0o600]
