"""`kubectl drafter`: a kubectl plugin for DrafterServings (the `kubectl-drafter` console script).

`tree.py` and `actions.py` are pure (objects in, a tree or a patch out); `cli.py` is the thin layer that
runs kubectl for them. Nothing here runs inside the operator.
"""
