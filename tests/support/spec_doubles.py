"""Pieces of the stand-ins for a DrafterServingSpec that tests build from SimpleNamespace."""

from __future__ import annotations

#: spec.target's parallel fields left unset (each size 1, no expert parallelism), as a stand-in's target carries them.
UNSET_LAYOUT = {"pipeline_parallel_size": None, "data_parallel_size": None, "expert_parallel": None}
