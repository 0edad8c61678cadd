"""The deterministic simulation of the operator (docs/testbed.md, "Deterministic simulation"): the real
reconcilers in a simulated apiserver, cluster, traffic and engines, with the invariants checked after every
event. Its tests and the mutant catalogue are tests/simulation; bench/simulate.py soaks it."""
