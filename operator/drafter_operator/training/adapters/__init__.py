"""CPU substitutions for the training frameworks, one small module each (listed in docs/training.md).

Each adapter is a self-contained script (torch, transformers and the framework only, no
drafter_operator imports) so it can run in a stock framework image, mounted beside a stage's files:
``hf_hidden_states.py`` (hidden-state capture with a transformers forward pass, both frameworks'
formats), ``eager_loss.py`` (SpecForge's Triton EAGLE-3 loss in plain torch), ``cpu_trainer.py``
(speculators' trainer on the CPU device). ``ADAPTERS_DIR`` is where they are in this package.
"""

from pathlib import Path

ADAPTERS_DIR = Path(__file__).resolve().parent
