"""The DrafterBenchmark controller: its pure decide (decide.py) and named steps and the
apply (apply.py)."""
