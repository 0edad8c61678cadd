"""drafter-operator: speculative-decoding LLM serving on Kubernetes, declared, measured and reversible."""

__version__ = "0.1.0"
