"""FaultOperations: the crash and failing-request operations both simulated worlds share."""

from __future__ import annotations

from types import SimpleNamespace

from drafter_testbed.simulation.apiserver import Faults
from drafter_testbed.simulation.clock import Clock
from drafter_testbed.simulation.fault_operations import FaultOperations


class Host(FaultOperations):
    def __init__(self) -> None:
        self.api = SimpleNamespace(faults=Faults())
        self.clock = Clock()
        self.pending_restart_after = 30.0


def run_until(host: Host, t: float) -> None:
    host.clock.run_for(t - host.clock.t, lambda: None)


def test_crash_arms_the_apiserver_and_sets_the_restart_delay():
    host = Host()
    host.op_crash({"after": 7, "restart": 120.0})
    assert (host.api.faults.crash_in, host.pending_restart_after) == (7, 120.0)


def test_failing_requests_end_after_their_spell():
    host = Host()
    host.op_api_faults({"rate": 0.3, "salt": 1, "for": 60.0})
    assert host.api.faults.fail_rate == 0.3
    run_until(host, 59.0)
    assert host.api.faults.fail_rate == 0.3
    run_until(host, 60.0)
    assert host.api.faults.fail_rate == 0.0


def test_an_earlier_spell_does_not_end_a_later_one():
    host = Host()
    host.op_api_faults({"rate": 0.3, "salt": 1, "for": 60.0})
    host.op_api_faults({"rate": 0.1, "salt": 2, "for": 600.0})
    run_until(host, 60.0)
    assert host.api.faults.fail_rate == 0.1
    run_until(host, 600.0)
    assert host.api.faults.fail_rate == 0.0
