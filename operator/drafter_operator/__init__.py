"""drafter-operator: speculative-decoding LLM serving on Kubernetes, declared, measured and reversible."""

__version__ = "0.1.0"

from drafter_operator.constants import API_GROUP, API_VERSION  # noqa: F401  (their home is constants.py)
