"""bench/cpu_by_process.py's categories: a process is counted under what it is, read from its command line."""

from __future__ import annotations

import os

from hypothesis import example, given
from hypothesis import strategies as st

from bench.cpu_by_process import category, cpu_ticks, machine_ticks

VENV = "/root/.cache/drafter-operator/venv-a8641a1ee27c-py311/bin/python"


def test_the_suites_processes_get_the_category_of_what_they_run():
    assert category([VENV, "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) == "python: pytest-xdist worker"
    assert category([VENV, "-m", "drafter_operator.cli", "run", "--namespace", "t-1"]) == "python: operator"
    assert category([VENV, "-m", "drafter_operator.cli", "emulate", "--engine", "vllm"]) == "python: engine emulator"
    assert category([VENV, "-m", "drafter_operator.cli", "regenerate", "--endpoint", "x"]) \
        == "python -m drafter_operator.cli"
    assert category(["/usr/local/bin/kube-apiserver", "--etcd-servers", "x"]) == "kube-apiserver"
    assert category(["/venv/bin/python", "/repo/operator/drafter_operator/training/adapters/cpu_trainer.py", "train"]) \
        == "python cpu_trainer.py train"
    assert category([]) == "kernel threads"


@given(st.sampled_from(["/usr/bin/python3", "/bin/sh", VENV]), st.sampled_from([[], ["-m"], ["-c"], ["-u", "-m"]]),
       st.lists(st.text(min_size=1, max_size=300), max_size=5))
@example("/usr/bin/python3", ["-m"], ["a" * 200])
@example("/usr/bin/python3", ["-c"], ["b" * 200])
def test_any_command_line_has_a_short_category(executable, flags, rest):
    assert len(category([executable, *flags, *rest])) <= 80


def test_this_process_and_the_machine_have_spent_cpu():
    busy, total = machine_ticks()
    assert 0 < busy <= total
    assert cpu_ticks(os.getpid()) >= 0
    assert cpu_ticks(2**22 + 1) is None  # no such process
