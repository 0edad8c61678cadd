"""The DrafterServing controller: its pure decide (decide.py) and named steps, the apply
(apply.py) and the per-serving loop (loop.py)."""
