"""Request capture end to end: a serving with spec.capture keeps a sample of its requests on its claim.

The engine pod runs as the emulator, which writes vLLM's own request log into the spool as vLLM does (held to the
real logger by tests/contract/test_capture_emulator_contract.py); the capture sidecar (`drafter-operator capture`,
a native sidecar) follows it and appends records to hour files under its pod's directory on the claim."""

from __future__ import annotations

import json

import pytest
import yaml

from drafter_testbed.serving_client import stream_completion
from tests.support.e2e_serving import apply, seed_serving, service_ip, serving_env, wait_ready  # noqa: F401

pytestmark = pytest.mark.e2e


def captured_records(claim_root) -> list[dict]:
    return [json.loads(line) for path in sorted(claim_root.glob("*/capture-*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def capture_claim(serving_env):
    """A pre-bound claim `captured` (no provisioner runs on the local cluster), its volume removed afterwards."""
    from drafter_testbed.volumes import static_claim

    cluster, namespace = serving_env
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        static_claim(namespace, "captured", f"/tmp/drafter-e2e/{namespace}-captured")))
    yield "captured"
    cluster.kubectl("delete", "pv", f"{namespace}-captured", "--wait=false", check=False)


def test_a_serving_with_capture_keeps_its_requests_prompts_and_responses_on_its_claim(serving_env, capture_claim,
                                                                                      local_cluster_only):
    cluster, namespace = serving_env
    from drafter_testbed import cluster as local

    serving = seed_serving(capture={"sampleRate": "1", "claimName": capture_claim, "responses": True})
    apply(cluster, namespace, serving)
    wait_ready(cluster, namespace, "kimi", timeout=120)
    (pod,) = [p for p in cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/serving=kimi")["items"]
              if not p["metadata"].get("deletionTimestamp")]
    sidecars = [c["name"] for c in pod["spec"].get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    assert sidecars, "the capture sidecar is a native sidecar of the engine pod"

    ip = service_ip(cluster, namespace, "kimi")
    answers = [stream_completion(ip, 8000, "/models/Kimi-K2.5", max_tokens=8) for _ in range(3)]
    assert all(answers)
    claim_root = local.Layout().root / "claims" / namespace / capture_claim

    def three_of_each():
        records = captured_records(claim_root)
        kinds = [r["kind"] for r in records]
        return kinds.count("prompt") >= 3 and kinds.count("response") >= 3 and records
    records = cluster.wait_for("three prompts and three responses on the claim", three_of_each, timeout=60)
    assert {r["engine"] for r in records} == {"vllm"}
    assert [p.name for p in claim_root.iterdir() if p.is_dir()] == [pod["metadata"]["name"]]  # its pod's directory
    prompts = {r["requestId"]: r for r in records if r["kind"] == "prompt"}
    responses = {r["requestId"]: r for r in records if r["kind"] == "response"}
    assert set(prompts) == set(responses), "each response is joined to its prompt by the request id"
    assert all(r["content"] for r in records)
    # Nothing is written twice: three requests, three records of each kind.
    assert len(prompts) == 3 and len(records) == 6, records



def complete(ip: str, prompt: str) -> dict:
    import urllib.request

    request = urllib.request.Request(f"http://{ip}:8000/v1/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": "/models/Kimi-K2.5", "prompt": prompt,
                                                      "max_tokens": 4}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_a_redaction_container_rewrites_every_record_before_it_reaches_the_claim(serving_env, capture_claim,
                                                                                 local_cluster_only):
    cluster, namespace = serving_env
    from drafter_testbed import cluster as local

    # A redaction a user would write: e-mail addresses masked by sed, in a stock image with a shell.
    mask = ["sed", "-e", r"s/[A-Za-z0-9._%+-]*@[A-Za-z0-9.-]*\.[a-z]*/<email>/g"]
    serving = seed_serving(capture={"sampleRate": "1", "claimName": capture_claim,
                                    "redaction": {"image": "busybox:1.36", "command": mask}})
    apply(cluster, namespace, serving)
    wait_ready(cluster, namespace, "kimi", timeout=120)
    ip = service_ip(cluster, namespace, "kimi")
    prompts = [f"Reply to customer{n}@example.com about invoice {n}" for n in range(3)]
    assert all(complete(ip, prompt)["choices"] for prompt in prompts)
    claim_root = local.Layout().root / "claims" / namespace / capture_claim

    def three_prompts():
        records = [r for r in captured_records(claim_root) if r["kind"] == "prompt"]
        return records if len(records) >= 3 else None
    records = cluster.wait_for("three prompt records on the claim", three_prompts, timeout=60)
    texts = sorted(json.dumps(r["content"]) for r in records)
    assert all("<email>" in text and "invoice" in text for text in texts), texts
    on_claim = "".join(path.read_text() for path in claim_root.rglob("*") if path.is_file())
    assert "@example.com" not in on_claim, "an address reached the claim unredacted"
