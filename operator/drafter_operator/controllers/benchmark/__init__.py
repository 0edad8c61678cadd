"""The DrafterBenchmark controller: its pure decide (decide.py) and named steps, the state one decision reads
and the plan it returns (state.py), and the apply (apply.py)."""
