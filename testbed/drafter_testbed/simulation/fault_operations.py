"""The scenario operations both simulated worlds (serving: world.py, batch: batch.py) run alike against
the fake apiserver: a pause, an operator crash, a spell of failing requests."""

from __future__ import annotations


class FaultOperations:
    """Mixed into a world that has `api` (a FakeApiserver), `clock` and `pending_restart_after`."""

    def op_wait(self, op: dict) -> None:
        pass  # the pause itself is the operation's dt

    def op_crash(self, op: dict) -> None:
        self.api.faults.crash_in = op["after"]
        self.pending_restart_after = op["restart"]

    def op_api_faults(self, op: dict) -> None:
        self.api.faults.fail_rate = op["rate"]
        self._faults_salt = op["salt"]
        self.clock.after(op["for"], self._end_api_faults, op["salt"])

    def _end_api_faults(self, salt: int) -> None:
        # Only the latest spell ends the failures: an earlier one's end must not cut a later one short.
        if getattr(self, "_faults_salt", None) == salt:
            self.api.faults.fail_rate = 0.0
