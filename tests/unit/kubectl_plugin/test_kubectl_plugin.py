"""`kubectl drafter`'s pure parts: the tree built from a serving's objects, and the patches of retry and
rollback (checked against the operator's own revision hash)."""

from __future__ import annotations

import copy
import re
import tomllib
from datetime import datetime, timedelta, timezone
from importlib import import_module
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.kubectl_plugin import actions, tree
from drafter_operator.resources.labels import REVISION_LABEL, SERVING_LABEL
from tests.support.e2e_serving import seed_serving

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
IMAGE = "vllm/vllm-openai:v0.33.0"


def stamp(minutes_ago: int) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, revision: str, ready: bool = True, phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "creationTimestamp": stamp(3),
                         "labels": {SERVING_LABEL: "kimi", REVISION_LABEL: revision}},
            "spec": {"containers": [{"name": "engine"}]},
            "status": {"phase": phase, "containerStatuses": [{"ready": ready, "restartCount": 0, "state": {}}]}}


# A revision record: (good, degraded) as the operator writes them (None: not yet decided).
records = st.lists(st.tuples(st.sampled_from([True, False, None]), st.booleans()), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(records=records, pods_per=st.lists(st.integers(0, 3), min_size=6, max_size=6), active_at=st.integers(0, 5))
def test_every_revision_and_pod_appears_once_newest_first_and_the_active_one_is_marked(records, pods_per, active_at):
    names = [f"rev{i:07d}" for i in range(len(records))]
    active = names[min(active_at, len(names) - 1)]
    revisions = [{"name": n, "good": g, "degraded": d, "since": stamp(60 - i)}
                 for i, (n, (g, d)) in enumerate(zip(names, records))]
    revisions = [{k: v for k, v in r.items() if v is not None} for r in revisions]
    pods = [pod(f"kimi-{n}-{j}", n) for n, count in zip(names, pods_per) for j in range(count)]
    serving = {"metadata": {"name": "kimi", "namespace": "team-a", "creationTimestamp": stamp(90)},
               "spec": {"replicas": 1}, "status": {"activeRevision": active, "revisions": revisions}}
    out = tree.render(tree.build(serving, pods, [], NOW), NOW)
    table = out.split("\nNAME ")[1].splitlines()[1:]
    revision_rows = [row for row in table if "# revision " in row]
    assert [re.search(r"revision (\w+)", row).group(1) for row in revision_rows] == names[::-1]
    for p in pods:
        rows = [row for row in table if p["metadata"]["name"] in row]
        assert len(rows) == 1 and " Pod " in rows[0]
    for row in revision_rows:
        name = re.search(r"revision (\w+)", row).group(1)
        record = revisions[names.index(name)]
        assert ("(active" in row) == (name == active)
        if record.get("good") is False:
            assert "✖ Failed" in row
        elif name == active:
            assert ("✖ Degraded" if record.get("degraded") else "✔ Serving") in row
    # Each pod row sits under its own revision's row.
    current = None
    for row in table:
        if "# revision " in row:
            current = re.search(r"revision (\w+)", row).group(1)
        elif " Pod " in row:
            assert re.search(r"kimi-(\w+)-\d", row).group(1) == current


def full_serving() -> dict:
    serving = seed_serving("kimi")
    serving["metadata"].update(namespace="team-a", creationTimestamp=stamp(90))
    spec = DrafterServingSpec.model_validate(serving["spec"])
    old = revision_hash(spec, IMAGE)
    drafter_before = copy.deepcopy(serving["spec"]["drafter"])
    serving["spec"]["drafter"]["numSpeculativeTokens"] = 3
    new = revision_hash(DrafterServingSpec.model_validate(serving["spec"]), IMAGE)
    serving["status"] = {
        "activeRevision": new, "previousRevision": old,
        "revisions": [{"name": old, "engine": "vllm", "drafter": "eagle3 k=5", "good": True, "image": IMAGE,
                       "drafterSpec": drafter_before, "since": stamp(60)},
                      {"name": new, "engine": "vllm", "drafter": "eagle3 k=3", "good": True, "degraded": True,
                       "image": IMAGE, "drafterSpec": copy.deepcopy(serving["spec"]["drafter"]), "since": stamp(5)}],
        "serving": {"revision": new, "engine": "vllm", "drafter": "eagle3 k=3", "image": IMAGE},
        "endpoint": {"url": "http://kimi.team-a.svc:8000/v1"},
        "acceptance": {"rate": 0.123, "meanLength": 1.6, "windowSeconds": 60, "revision": new},
        "lastBenchmark": {"name": "kimi-bench-b", "tokensPerSecond": 90.5, "speedup": 1.1, "revision": new},
        "conditions": [{"type": "Ready", "status": "True", "reason": "EngineReady"},
                       {"type": "Degraded", "status": "True", "reason": "LowAcceptance",
                        "message": "acceptance 0.123 below 0.3"}],
    }
    return serving


def test_the_header_says_what_serves_acceptance_now_and_at_promotion_the_last_benchmark_and_conditions():
    serving = full_serving()
    new = serving["status"]["activeRevision"]
    bench = [{"metadata": {"name": name, "creationTimestamp": stamp(minutes)}, "spec": {"servingRef": {"name": "kimi"}},
              "status": {"state": "Succeeded", "revision": new,
                         "result": {"acceptanceRate": rate, "acceptanceLength": 2.0, "tokensPerSecond": 90.5}}}
             for name, minutes, rate in (("kimi-bench-b", 2, 0.2), ("kimi-gate", 4, 0.41))]
    bench.append({"metadata": {"name": "other", "creationTimestamp": stamp(1)}, "spec": {"servingRef": {"name": "x"}},
                  "status": {"state": "Succeeded", "revision": new, "result": {"acceptanceRate": 0.9}}})
    out = tree.render(tree.build(serving, [pod(f"kimi-{new}-a", new)], bench, NOW), NOW)
    assert "Status:                  ✖ Degraded" in out
    assert f"Serving:                 revision {new}: vllm, drafter eagle3 k=3" in out
    assert "Acceptance now:          rate 12.3%, mean length 1.60 over 60s" in out
    assert "Acceptance at promotion: rate 41.0%, mean length 2.00 (benchmark kimi-gate)" in out
    assert "Last benchmark:          kimi-bench-b: 90.5 tok/s, 1.10x" in out
    assert "Degraded          True    LowAcceptance: acceptance 0.123 below 0.3" in out
    assert f"kimi-{new}-a" in out and "✔ Running" in out and "ready:1/1" in out
    assert "⟳ kimi" in out and "5m" in out  # the active revision's age


def test_identity_rows_say_what_serves_and_where():
    serving = full_serving()
    rows = dict(tree.identity_rows(serving))
    assert rows["Name"] == "kimi" and rows["Namespace"] == "team-a" and rows["Image"] == IMAGE
    assert rows["Endpoint"] == "http://kimi.team-a.svc:8000/v1" and rows["Serving"].endswith("vllm, drafter eagle3 k=3")
    bare = tree.identity_rows({"metadata": {"name": "kimi"}})
    assert [key for key, _ in bare] == ["Name", "Namespace", "Status", "Serving"] and bare[-1][1] == "nothing yet"


def test_acceptance_rows_show_only_the_active_revisions_window():
    status = full_serving()["status"]
    assert tree.acceptance_rows(status) == [("Acceptance now", "rate 12.3%, mean length 1.60 over 60s")]
    assert tree.acceptance_rows({**status, "acceptance": {**status["acceptance"], "revision": "older"}}) == [
        ("Acceptance now", "-")]
    assert tree.acceptance_rows({}) == [("Acceptance now", "-")]


def test_benchmark_rows():
    status = {"activeRevision": "r2"}
    running = {"metadata": {"name": "kimi-b", "creationTimestamp": stamp(1)}, "spec": {"servingRef": {"name": "kimi"}}}
    assert tree.benchmark_rows("kimi", status, []) == [
        ("Acceptance at promotion", "- (no finished benchmark of the serving revision)"),
        ("Last benchmark", "none (kubectl drafter benchmark kimi)")]
    assert tree.benchmark_rows("kimi", status, [running])[1] == ("Last benchmark", "kimi-b: Pending")
    done = {**running, "status": {"state": "Succeeded", "revision": "r2", "result": {"acceptanceRate": 0.5}}}
    rows = tree.benchmark_rows("kimi", {**status, "lastBenchmark": {"name": "kimi-b"}}, [done])
    assert rows == [("Acceptance at promotion", "rate 50.0% (benchmark kimi-b)"), ("Last benchmark", "kimi-b: no figures")]


def test_action_row():
    assert tree.action_row({}) == ("Action", "none")
    assert tree.action_row({"speculationDisabled": "low"}) == ("Action", "speculation disabled: low")
    action = {"action": "Rollback", "revision": "a", "degradedRevision": "b", "since": "t", "message": "m"}
    assert tree.action_row({"degradedAction": action, "speculationDisabled": "x"}) == (
        "Action", "Rollback: serving revision a instead of b since t: m")


def test_revision_tree_keeps_pods_of_a_revision_the_status_does_not_list_yet():
    serving = full_serving()
    new = serving["status"]["activeRevision"]
    root = tree.revision_tree(serving, [pod("kimi-x-a", "unlisted"), pod(f"kimi-{new}-b", new), pod(f"kimi-{new}-a", new)])
    labels = [child.name for child in root.children]
    assert labels[0] == "revision unlisted" and labels[1] == f"revision {new} (active)" and "(previous)" in labels[2]
    assert [p.name for p in root.children[1].children] == [f"kimi-{new}-a", f"kimi-{new}-b"]
    assert root.info == "replicas:1"


def test_revision_node_says_why_a_revision_failed():
    node = tree.revision_node({"name": "r1", "engine": "vllm", "failedReason": "GateFailed: 0.9x"}, {}, [])
    assert node.name == "revision r1" and node.info == "vllm: GateFailed: 0.9x" and node.children == []
    assert tree.revision_node({"name": "r1", "failedReason": "x"}, {}, []).info == "x"


def test_rollback_restores_the_last_good_revision_exactly():
    serving = full_serving()
    old = serving["status"]["previousRevision"]
    patch, revision = actions.rollback_patch(serving)
    assert revision == old
    spec = copy.deepcopy(serving["spec"])
    for op in patch:
        spec[op["path"].split("/")[-1]] = op["value"]
    assert spec.get("image", IMAGE) == IMAGE  # the image it ran, the one running now
    assert revision_hash(DrafterServingSpec.model_validate(spec), IMAGE) == old


def test_rollback_refuses_a_revision_the_status_cannot_restore():
    serving = full_serving()
    serving["spec"]["target"]["maxModelLen"] = 4096  # the target changed since: not recorded per revision
    with pytest.raises(actions.PluginError, match="differed in its target or GPUs per replica"):
        actions.rollback_patch(serving)
    serving = full_serving()
    serving["status"]["revisions"][0]["good"] = False
    with pytest.raises(actions.PluginError, match="no revision to roll back to"):
        actions.rollback_patch(serving)


def test_rollback_pins_the_image_when_the_good_revision_ran_another():
    serving = full_serving()
    record = serving["status"]["revisions"][0]
    record["image"] = "vllm/vllm-openai:v0.32.0"
    record["name"] = revision_hash(DrafterServingSpec.model_validate(
        {**serving["spec"], "drafter": record["drafterSpec"]}), record["image"])
    patch, revision = actions.rollback_patch(serving)
    assert revision == record["name"]
    assert {"op": "add", "path": "/spec/image", "value": "vllm/vllm-openai:v0.32.0"} in patch


def test_retry_sets_a_new_annotation_only_for_a_failed_newest_revision():
    serving = full_serving()
    with pytest.raises(actions.PluginError, match="has not failed"):
        actions.retry_annotation(serving, "1")
    serving["status"]["revisions"][-1]["good"] = False
    assert actions.retry_annotation(serving, "17") == {"metadata": {"annotations": {"drafter.dev/retry": "17"}}}
    serving["metadata"]["annotations"] = {"drafter.dev/retry": "17"}
    with pytest.raises(actions.PluginError, match="needs a new value"):
        actions.retry_annotation(serving, "17")


def test_retrain_asks_only_a_serving_with_retraining_and_only_with_a_new_value():
    serving = full_serving()
    with pytest.raises(actions.PluginError, match="no spec.retraining"):
        actions.retrain_annotation(serving, "1")
    serving["spec"]["retraining"] = {"template": {"spec": {}}}
    assert actions.retrain_annotation(serving, "17") == {"metadata": {"annotations": {"drafter.dev/retrain": "17"}}}
    serving["metadata"]["annotations"] = {"drafter.dev/retrain": "17"}
    with pytest.raises(actions.PluginError, match="needs a new value"):
        actions.retrain_annotation(serving, "17")


def test_the_benchmark_object_validates_against_the_api_model():
    from drafter_operator.api import DrafterBenchmark

    body = actions.benchmark_object("kimi", 3, 64, 2)
    DrafterBenchmark.model_validate({**body, "metadata": {"name": "kimi-bench-x"}})
    assert body["metadata"]["generateName"] == "kimi-bench-"


def test_the_console_script_is_kubectl_drafter():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["kubectl-drafter"].partition(":")
    assert getattr(import_module(module), function) is import_module("drafter_operator.kubectl_plugin.cli").main


def test_known_bad_prints_the_table_without_a_cluster(capsys):
    import json

    from drafter_operator.controllers.serving.known_bad import packaged_table
    from drafter_operator.kubectl_plugin import cli

    assert cli.main(["known-bad", "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["version"] == packaged_table().version
    assert [r["id"] for r in document["rows"]] == [r.id for r in packaged_table().rows]
    assert cli.main(["known-bad"]) == 0
    assert capsys.readouterr().out.startswith("ID ")


@pytest.mark.parametrize("nodes_readable", [True, False])
def test_known_bad_for_a_serving_reads_it_its_pods_and_their_nodes(monkeypatch, capsys, nodes_readable):
    from drafter_operator.kubectl_plugin import cli

    serving = seed_serving("kimi")
    serving["metadata"]["namespace"] = "team-a"
    serving["spec"].pop("placement")  # the GPU is not pinned: it comes from the node the pod runs on
    serving["spec"]["engine"], serving["spec"]["image"] = "sglang", "lmsysorg/sglang:v0.5.23"
    serving["spec"]["drafter"] = {"method": "dspark", "numSpeculativeTokens": 5}
    for parser in ("toolCallParser", "reasoningParser"):
        serving["spec"]["target"].pop(parser)
    asked = []

    def get(self, *args):
        asked.append(args)
        if args[0] == "drafterserving":
            return serving
        if args[0] == "pods":
            return {"items": [{"metadata": {"name": "kimi-abc-0"}, "spec": {"nodeName": "gpu-7"}}]}
        if not nodes_readable:
            raise actions.PluginError('nodes "gpu-7" is forbidden')
        # As kubectl answers `get nodes gpu-7 -o json`: one name, the node itself (not a List).
        return {"kind": "Node", "metadata": {"name": "gpu-7", "labels": {"nvidia.com/gpu.product": "NVIDIA-B300-SXM6-AC"}}}

    monkeypatch.setattr(cli.Kubectl, "get", get)
    assert cli.main(["known-bad", "--serving", "kimi", "-n", "team-a"]) == 0
    out = capsys.readouterr()
    assert ("drafterserving", "kimi") in asked and ("nodes", "gpu-7") in asked
    mark = "matches" if nodes_readable else "GPU pending"
    assert re.search(rf"^{mark}\s+sglang-dspark-depth5-sm120-b300\s", out.out, re.M), out.out
    assert "vllm-mtp-kimi" not in out.out
    assert ("not readable" in out.err) != nodes_readable
