"""A service is its process group: what its dead leader left running is killed once it is found dead."""

import sys

import psutil
import pytest

from infra import processes
from infra.settings import load

#: A leader that starts a worker in its group, which runs a task in a session of its own (as Airflow's
#: scheduler's executor workers run tasks), prints their pids and exits; they end within a minute anyway.
LEADER = """
import subprocess, sys
worker = "import subprocess, time; print(subprocess.Popen(['sleep', '60'], start_new_session=True).pid, flush=True); time.sleep(60)"
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
