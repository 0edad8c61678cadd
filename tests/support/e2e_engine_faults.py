"""End-to-end: the seed serving made small (one GPU, a BlueGreen swap), for tests that run several."""
from __future__ import annotations

from tests.support.e2e_acceptance import GOOD_DRAFTER
from tests.support.e2e_serving import seed_serving


def small(name: str, **spec) -> dict:
    """The seed serving on one GPU (several fit a node, so a BlueGreen swap has room)."""
    serving = seed_serving(name, **{"swap": {"strategy": "BlueGreen"}, **spec})
    serving["spec"]["target"]["tensorParallelSize"] = 1
    serving["spec"]["resources"]["gpusPerReplica"] = 1
    serving["spec"]["drafter"]["model"] = GOOD_DRAFTER
    serving["spec"].pop("acceptance", None)
    return serving
