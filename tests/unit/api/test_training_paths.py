"""DrafterTraining's path fields: one spelling each, inside the model volume, and the output apart from
every model and dataset it could overwrite (api/training/spec.py), against an independent statement of the
rules (posixpath / PurePosixPath)."""

from __future__ import annotations

import copy
import posixpath
from pathlib import PurePosixPath

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator.api.common import path_normalised, paths_overlap
from drafter_operator.api.training import DrafterTrainingSpec

MOUNT = "/models"
TARGET = "/models/Kimi-K2.5"
DATASET = "/models/datasets/prompts.jsonl"
BASE = {"target": {"model": TARGET}, "storage": {"modelClaim": "models"},
        "data": {"dataset": DATASET, "numSamples": 10, "chatTemplate": "qwen"},
        "hiddenStates": {"storage": {"size": "1Ti"}}, "output": {"path": "/models/drafters/new"}}

# Segments that spell the same place differently, climb out, or are plain names (including "..." and
# ".hidden", which are names, not dot segments).
SEGMENTS = st.sampled_from(["models", "drafters", "Kimi-K2.5", "datasets", "prompts.jsonl", "new", ".", "..",
                            "", "...", ".hidden", "etc"])
PATHS = st.builds(lambda parts, slash: "/" + "/".join(parts) + ("/" if slash else ""),
                  st.lists(SEGMENTS, min_size=0, max_size=5), st.booleans())


def spelled_once(path: str) -> bool:
    """Independent statement of a normalised absolute path: normpath leaves it as it is (POSIX keeps a
    leading '//', which is two spellings too)."""
    return posixpath.normpath(path) == path and not path.startswith("//") and path != "/"


def inside(path: str, root: str) -> bool:
    return PurePosixPath(path).is_relative_to(root)


def accepted(spec: dict) -> bool:
    try:
        DrafterTrainingSpec.model_validate(spec)
        return True
    except ValidationError:
        return False


@settings(max_examples=400, deadline=None)
@given(PATHS)
def test_output_path_is_accepted_only_spelled_once_in_a_directory_of_the_volume_apart_from_models(path):
    spec = copy.deepcopy(BASE)
    spec["output"]["path"] = path
    expected = (spelled_once(path) and inside(path, MOUNT) and posixpath.dirname(path) != MOUNT and path != MOUNT
                and not inside(path, TARGET) and not inside(TARGET, path)
                and not inside(path, DATASET) and not inside(DATASET, path))
    assert accepted(spec) == expected, path


@settings(max_examples=300, deadline=None)
@given(PATHS, st.sampled_from(["target", "dataset", "baseDrafter"]))
def test_model_and_dataset_paths_are_accepted_only_spelled_once_inside_the_volume(path, field):
    spec = copy.deepcopy(BASE)
    spec["output"]["path"] = "/models/out/new"
    if field == "target":
        spec["target"]["model"] = path
    elif field == "dataset":
        spec["data"]["dataset"] = path
    else:
        spec["baseDrafter"] = path
    expected = (spelled_once(path) and inside(path, MOUNT) and path != MOUNT
                and not inside(path, "/models/out/new") and not inside("/models/out/new", path))
    assert accepted(spec) == expected, (field, path)


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}/[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True))
def test_hub_ids_are_not_paths_and_stay_valid(hub_id):
    spec = copy.deepcopy(BASE)
    spec["target"]["model"] = hub_id
    spec["data"]["dataset"] = hub_id
    spec["baseDrafter"] = hub_id
    assert path_normalised(hub_id)
    assert accepted(spec)


@given(PATHS, PATHS)
def test_overlap_is_containment_either_way(a, b):
    if spelled_once(a) and spelled_once(b):
        assert paths_overlap(a, b) == (inside(a, b) or inside(b, a))


def test_every_refusal_names_the_field_and_the_fix():
    for path, words in [("/models/drafters/../Kimi-K2.5", "spec.output.path must be a normalised absolute path"),
                        ("/models/Kimi-K2.5/eagle", "spec.output.path must not overwrite spec.target.model"),
                        ("/models/eagle", "spec.output.path must be in a directory of its own"),
                        ("/elsewhere/x/eagle", "spec.output.path must be under spec.storage.mountPath")]:
        spec = copy.deepcopy(BASE)
        spec["output"]["path"] = path
        try:
            DrafterTrainingSpec.model_validate(spec)
        except ValidationError as exc:
            assert words in str(exc) and "e.g. /models/" in str(exc), str(exc)
        else:
            raise AssertionError(f"{path} was accepted")
