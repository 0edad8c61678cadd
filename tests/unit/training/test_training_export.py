"""Export's publication on a real directory (training/export.py): staged beside the output, renamed into
place whole, an existing output refused unless overwrite, the old one intact whatever crashes before the
rename, and the content digest recorded in the directory, the termination message and status."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.controllers.training.observe import stage_artifacts as _artifacts
from drafter_operator.training import Command, Publish, Stage, export
from drafter_operator.training.stage_runner import run_stage, stage_plan

OLD = {"config.json": b'{"old": true}', "model.safetensors": b"old-weights"}
NEW = {"config.json": b'{"new": true}', "model.safetensors": b"new-weights" * 100, "sub/extra.bin": b"\x00\x01"}


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def paths(tmp_path: Path, tag: str = "g3") -> tuple[str, str]:
    """The output and its staging directory; the parent exists, as Export requires."""
    output = str(tmp_path / "drafters" / "kimi-eagle3")
    (tmp_path / "drafters").mkdir(exist_ok=True)
    return output, export.staging_path(output, tag)


def export_new(output: str, staging: str, overwrite: bool, **fs) -> str:
    """What an Export stage does: prepare, the commands write the staging directory, publish."""
    export.prepare(output, staging, overwrite)
    write_tree(Path(staging), NEW)
    return export.publish(output, staging, overwrite, "g3", **fs)


def test_staging_is_a_hidden_sibling_named_after_the_generation():
    assert export.staging_path("/models/drafters/kimi", "g7") == "/models/drafters/.kimi.tmp-g7"
    assert export.aside_path("/models/drafters/kimi", "g7") == "/models/drafters/.kimi.old-g7"


def test_a_new_output_appears_whole_with_its_digest_and_no_staging_left(tmp_path):
    output, staging = paths(tmp_path)
    digest = export_new(output, staging, overwrite=False)
    files = read_tree(Path(output))
    assert {k: v for k, v in files.items() if k != export.DIGEST_FILE} == NEW
    assert json.loads(files[export.DIGEST_FILE]) == {"digest": digest}
    assert digest == export.content_digest(output) and digest.startswith("sha256:") and len(digest) == 71
    assert sorted(p.name for p in Path(output).parent.iterdir()) == ["kimi-eagle3"]


def test_an_existing_output_is_refused_without_overwrite_before_any_work_and_kept(tmp_path):
    output, staging = paths(tmp_path)
    write_tree(Path(output), OLD)
    with pytest.raises(export.ExportRefused, match=r"spec\.output\.path .* already exists: set spec\.output\.overwrite"):
        export.prepare(output, staging, overwrite=False)
    # ... and again at publication, should it have appeared while the stage ran.
    Path(staging).mkdir()
    write_tree(Path(staging), NEW)
    with pytest.raises(export.ExportRefused):
        export.publish(output, staging, overwrite=False, tag="g3")
    assert read_tree(Path(output)) == OLD


def test_a_crash_before_the_rename_leaves_the_old_output_intact(tmp_path):
    output, staging = paths(tmp_path)
    write_tree(Path(output), OLD)

    def crash(*_):
        raise OSError("node lost")

    with pytest.raises(OSError):
        export_new(output, staging, overwrite=True, rename=crash, exchange=crash)
    assert read_tree(Path(output)) == OLD
    # The next attempt of this generation starts from an empty staging directory (no nesting, no mix).
    digest = export_new(output, staging, overwrite=True)
    assert {k: v for k, v in read_tree(Path(output)).items() if k != export.DIGEST_FILE} == NEW
    assert digest == export.content_digest(output)


@pytest.mark.parametrize("exchange", ["renameat2", "two renames"])
def test_overwrite_replaces_the_whole_directory_and_deletes_the_old(tmp_path, exchange):
    output, staging = paths(tmp_path)
    write_tree(Path(output), {**OLD, "stale-only-in-old.bin": b"x"})
    fs = {} if exchange == "renameat2" else {"exchange": lambda a, b: False}
    export_new(output, staging, overwrite=True, **fs)
    assert {k: v for k, v in read_tree(Path(output)).items() if k != export.DIGEST_FILE} == NEW
    assert sorted(p.name for p in Path(output).parent.iterdir()) == ["kimi-eagle3"]


def test_without_an_atomic_exchange_a_crash_between_the_renames_keeps_the_old_aside(tmp_path):
    output, staging = paths(tmp_path)
    write_tree(Path(output), OLD)
    calls = []

    def rename_then_crash(a, b):
        calls.append((a, b))
        if len(calls) == 2:
            raise OSError("node lost")
        Path(a).rename(b)

    with pytest.raises(OSError):
        export_new(output, staging, overwrite=True, rename=rename_then_crash, exchange=lambda a, b: False)
    assert read_tree(Path(export.aside_path(output, "g3"))) == OLD  # no byte of the old drafter lost


def test_a_stale_staging_directory_is_emptied_not_nested_into(tmp_path):
    output, staging = paths(tmp_path)
    write_tree(Path(staging), {"half-written.bin": b"partial"})
    export_new(output, staging, overwrite=False)
    assert "half-written.bin" not in read_tree(Path(output))


FILES = st.dictionaries(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6})?\.bin", fullmatch=True), st.binary(max_size=64),
                        min_size=1, max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(FILES, st.data())
def test_the_digest_changes_exactly_when_a_name_or_a_byte_changes(tmp_path_factory, files, data):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    write_tree(a, files)
    write_tree(b, dict(reversed(list(files.items()))))  # written in another order: same digest
    assert export.content_digest(a) == export.content_digest(b)
    (a / export.DIGEST_FILE).write_text("{}")  # the record itself is not part of what it records
    assert export.content_digest(a) == export.content_digest(b)
    name = data.draw(st.sampled_from(sorted(files)))
    changed = data.draw(st.binary(max_size=64).filter(lambda x: x != files[name]))
    (b / name).write_bytes(changed)
    assert export.content_digest(a) != export.content_digest(b)


def test_the_export_stage_reports_the_digest_in_its_termination_message_and_status(tmp_path):
    output, staging = paths(tmp_path, "g1")
    copy = Command((sys.executable, "-c", "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.mkdir();"
                    "(p / 'model.safetensors').write_bytes(b'w' * 10)", staging))
    stage = Stage("Export", (copy,), outputs={"drafter": output},
                  publish=Publish(path=output, staging=staging, overwrite=False, tag="g1"))
    log = tmp_path / "termination-log"
    assert run_stage(json.loads(json.dumps(stage_plan(stage))), str(tmp_path / "files"), str(log)) == 0
    outcome = json.loads(log.read_text())
    digest = export.content_digest(output)
    assert outcome["contentDigest"] == digest and outcome["outputs"]["drafter"]["contentDigest"] == digest
    # Where the operator puts it: status.artifacts, Export's entry.
    job = {"metadata": {"name": "t-export-g1", "labels": {"drafter.dev/training-stage": "Export"}},
           "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    pod = {"metadata": {"labels": {"job-name": "t-export-g1"}},
           "status": {"containerStatuses": [{"state": {"terminated": {"message": log.read_text()}}}]}}
    (artifact,) = _artifacts([job], (pod,), None)
    assert artifact == {"stage": "Export", "path": output, "sizeBytes": outcome["outputs"]["drafter"]["sizeBytes"],
                        "contentDigest": digest}


def test_an_export_stage_onto_an_existing_output_fails_before_its_commands_and_says_the_fix(tmp_path):
    output, staging = paths(tmp_path, "g1")
    write_tree(Path(output), OLD)
    ran = tmp_path / "ran"
    stage = Stage("Export", (Command((sys.executable, "-c", f"open({str(ran)!r}, 'w')")),), outputs={"drafter": output},
                  publish=Publish(path=output, staging=staging, overwrite=False, tag="g1"))
    log = tmp_path / "termination-log"
    assert run_stage(stage_plan(stage), str(tmp_path / "files"), str(log)) == 1
    outcome = json.loads(log.read_text())
    assert outcome["reason"] == "OutputExists" and "spec.output.overwrite: true" in outcome["tail"]
    assert not ran.exists() and read_tree(Path(output)) == OLD


def test_a_stage_before_export_fails_at_once_on_an_output_export_would_refuse(tmp_path, monkeypatch):
    import yaml

    from drafter_operator.cli import main
    from drafter_operator.container_paths import PATH_MAP_ENV

    body = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    body["spec"].pop("baseDrafter")  # a hub id: never looked up from a unit test
    spec_file = tmp_path / "training.json"
    spec_file.write_text(json.dumps(body["spec"]))
    volume = tmp_path / "models"
    target = volume / body["spec"]["target"]["model"].removeprefix("/models/")
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 61, "vocab_size": 1000,
        "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6}))
    write_tree(volume / body["spec"]["output"]["path"].removeprefix("/models/"), OLD)
    monkeypatch.setenv(PATH_MAP_ENV, json.dumps({"/models": str(volume)}))
    log = tmp_path / "termination-log"
    code = main(["run-stage", "--training", str(spec_file), "--stage", "Train", "--termination-log", str(log),
                 "--files", str(tmp_path / "files"), "--generation-endpoint", "http://127.0.0.1:9/v1"])
    outcome = json.loads(log.read_text())
    assert code == 1 and outcome["reason"] == "OutputExists", outcome
    assert "set spec.output.overwrite: true" in outcome["tail"]


def test_only_an_existing_output_without_overwrite_stops_a_stage_early_and_export_checks_for_itself():
    from drafter_operator.api.training import DrafterTrainingSpec
    from drafter_operator.training.stage_runner import output_refusal

    base = {"target": {"model": "/models/T"}, "storage": {"modelClaim": "m"},
            "data": {"dataset": "/models/d.jsonl", "numSamples": 1, "chatTemplate": "qwen"},
            "hiddenStates": {"storage": {"size": "1Ti"}}, "output": {"path": "/models/drafters/x"}}
    keep = DrafterTrainingSpec.model_validate(base)
    replace = DrafterTrainingSpec.model_validate({**base, "output": {"path": "/models/drafters/x", "overwrite": True}})
    train = Stage("Train", ())
    publishing = Stage("Export", (), publish=Publish(path="/models/drafters/x", staging="/models/drafters/.x.tmp-g1"))
    reason, message = output_refusal(keep, train, output_exists=True)
    assert reason == "OutputExists" and "spec.output.overwrite" in message
    assert output_refusal(keep, train, output_exists=False) is None
    assert output_refusal(replace, train, output_exists=True) is None
    assert output_refusal(keep, publishing, output_exists=True) is None  # export.prepare refuses it there
    assert output_refusal(replace, train, output_exists=False, parent_problem="no parent") == (
        "OutputParentNotWritable", "no parent")


def test_export_refuses_a_missing_or_unwritable_parent_with_the_fix(tmp_path):
    output = str(tmp_path / "drafters" / "kimi-eagle3")
    with pytest.raises(export.ExportRefused, match="does not exist: create .* writable by UID or GID 1000") as info:
        export.prepare(output, export.staging_path(output, "g1"), overwrite=False)
    assert info.value.reason == "OutputParentNotWritable"
    (tmp_path / "drafters").mkdir()
    assert export.parent_problem(output, writable=lambda p: False).startswith(
        f"the parent directory of spec.output.path {output} is not writable by the trainer")
    assert export.parent_problem(output, writable=lambda p: True) is None


def test_writable_by_mode_bits_follows_owner_then_group_then_others(tmp_path, monkeypatch):
    import os

    path = tmp_path / "d"
    path.mkdir()
    info = os.stat(path)

    def writable_by_me() -> bool:  # Export's own test of the output's parent, by mode bits
        return export.parent_problem(str(path / "drafter")) is None

    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setattr(os, "getegid", lambda: 4242)
    monkeypatch.setattr(os, "getgroups", lambda: [info.st_gid])
    # A member of the directory's group: the group's bits decide (POSIX consults others' bits only for others).
    for mode, writable in [(0o755, False), (0o775, True), (0o757, False), (0o2770, True)]:
        path.chmod(mode)
        assert writable_by_me() == writable, oct(mode)
    monkeypatch.setattr(os, "getgroups", lambda: [])
    monkeypatch.setattr(os, "getegid", lambda: info.st_gid + 1)
    for mode, writable in [(0o775, False), (0o757, True)]:
        path.chmod(mode)
        assert writable_by_me() == writable, oct(mode)
    monkeypatch.setattr(os, "geteuid", lambda: info.st_uid)
    path.chmod(0o575)  # the owner's own bits decide for the owner, even when the group may write
    assert writable_by_me() is (info.st_uid == 0)
    path.chmod(0o755)
