"""Acceptance: how well a serving's drafter is accepted, and what the operator does about it.

One room, below the controllers (it never imports them):

- measurement: ``engine_source.py`` (the Ready pods' ``/metrics``) and ``prometheus_source.py`` (a
  Prometheus query) give samples; ``measurement.py`` keeps one watch per serving and turns each sample
  into a ``Measurement``.
- verdict: ``verdict.py``, the Degraded state machine (thresholds, hysteresis, the ``for`` clock), with
  ``break_even.py`` for the ``auto`` thresholds learned from a benchmark.
- actions: ``actions.py``, what ``spec.acceptance.onDegraded`` does about a Degraded revision.
- the message: ``message.py``, every reason and sentence the Degraded condition says.

The serving controller's acceptance step (``controllers/serving/acceptance.py``) reads all four.
"""
