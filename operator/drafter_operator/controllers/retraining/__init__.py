"""The retraining controller: a DrafterServing's spec.retraining starts DrafterTrainings (decide.py, pure; apply.py)."""
