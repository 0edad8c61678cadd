"""The environments the contract, image and training tiers run in, built on first use.

Each one is a cached build outside the repository (a virtualenv with the real engines or training
frameworks, the operator image's OCI layout) that a script prints the path of, building it first when it is
missing and answering at once when it is not. `./dev test` builds them all before the suite and exports
their variables; a narrower run (`./dev test tests/contract/...`, plain pytest) gets them here, so a tier
whose environment is missing runs after building it instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]



@dataclass(frozen=True)
class Environment:
    variable: str  # what `./dev test` exports and the tests read
    command: tuple[str, ...]  # prints the built path on stdout (relative to the repository)
    what: str


ENGINES = Environment("DRAFTER_ENGINE_PYTHON", (".ci/engine-contract-env",),
                      "vLLM 0.33.0 + SGLang 0.5.23 and their parsers' dependencies, ~7 GB, about 3 minutes")
CLIENTS = Environment("DRAFTER_CLIENTS_PYTHON", (".ci/clients-env",),
                      "the engines' and GuideLLM's benchmark clients")
TRAINING = Environment("DRAFTER_TRAINING_PYTHON", (".ci/training-env",),
                       "SpecForge 0.2.0 + speculators 0.9.0 beside the engines' environment, ~310 MB")
OPERATOR_IMAGE = Environment("DRAFTER_OPERATOR_IMAGE", ("images/build", "operator"),
                             "the operator image's OCI layout, rebuilt when its sources change")


def built(environment: Environment, config: pytest.Config | None = None) -> str:
    """The path `environment`'s variable names, or the one its script builds (then exported, so that the
    run's subprocesses and later fixtures see it). The script's progress reaches the terminal unless pytest
    captures it; a failed build fails the test that needed it, with the script's last words."""
    variable, command, what = environment.variable, environment.command, environment.what
    if os.environ.get(variable):
        return os.environ[variable]
    capture = config.pluginmanager.get_plugin("capturemanager") if config is not None else None
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print(f"\n{variable} is not set: {' '.join(command)} ({what}; cached afterwards)", flush=True)
        proc = subprocess.run([str(REPO / command[0]), *command[1:]], cwd=REPO, stdout=subprocess.PIPE, text=True)
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not path:
        pytest.fail(f"{' '.join(command)} failed ({proc.returncode}) building {variable} ({what}); run it by "
                    "hand to see why", pytrace=False)
    os.environ[variable] = path
    return path
