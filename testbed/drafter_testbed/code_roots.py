"""Where this process's code lives: the source roots of drafter-operator and drafter-testbed as it imported them.

A process that starts another Python (a pod of the local process runner, the training environment running the
tiny target) hands this on as PYTHONPATH, so the child runs the same checkout's code as its parent, whatever
the shared virtualenv's editable install points at (docs/testbed.md: each checkout runs its own code).
"""

from __future__ import annotations

import os
from pathlib import Path


def source_pythonpath() -> str:
    """PYTHONPATH naming drafter-testbed's source root and the operator's (whose package data holds the
    tokenizer), as this process imported them: enough for a Python that has neither package installed."""
    import drafter_operator
    import drafter_testbed

    roots = (Path(drafter_testbed.__file__).resolve().parents[1], Path(drafter_operator.__file__).resolve().parents[1])
    return os.pathsep.join(map(str, roots))
