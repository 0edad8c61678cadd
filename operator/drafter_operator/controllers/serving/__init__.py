"""The DrafterServing controller: its pure decide (decide.py) and named steps, the state one decision reads and
the plan it returns (state.py), the apply (apply.py) and the per-serving loop (loop.py)."""
