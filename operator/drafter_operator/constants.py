"""The operator's fixed names, in one place: its API group and version, the label and annotation keys it
writes on what it creates, the engines and speculative methods it knows, and its own port.

Everything else imports these (the CRDs, the RBAC rules, the kopf handlers, the builders), so a key is
spelled once: a typo in a second copy would be a selector that silently matches nothing. This module
imports only families.py (the drafter families' table, which its method sets are derived from): it sits at
the bottom of the rooms (tests/unit/policy/test_layering.py).
"""

from __future__ import annotations

from typing import Literal, get_args

from drafter_operator import families

# --------------------------------------------------------------------------------------------------
# The API

#: The type of every custom object's ``apiVersion`` field (the models' Literal; the CRDs' enum comes from it).
ApiGroupVersion = Literal["drafter.dev/v1alpha1"]
#: What every custom object's ``apiVersion`` says, and the group/version in its URL.
API_GROUP_VERSION: str = get_args(ApiGroupVersion)[0]
API_GROUP, API_VERSION = API_GROUP_VERSION.split("/")
#: The kinds' resource names (their URLs, RBAC rules and kopf watches); each model's ``plural`` is one of these.
SERVING_PLURAL = "drafterservings"
BENCHMARK_PLURAL = "drafterbenchmarks"
TRAINING_PLURAL = "draftertrainings"

# --------------------------------------------------------------------------------------------------
# Labels: selectors find the operator's objects by these, so they never change for a running object.

#: Who manages it (the Kubernetes recommended label), on everything the operator creates.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "drafter-operator"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
#: On the CRDs: the application they are part of.
PART_OF_LABEL = "app.kubernetes.io/part-of"

#: The DrafterServing an engine pod, Deployment or gate benchmark belongs to.
SERVING_LABEL = f"{API_GROUP}/serving"
#: The serving's revision a pod runs (the Service selects the active one by it).
REVISION_LABEL = f"{API_GROUP}/revision"
#: The DrafterTraining a stage Job, claim or benchmark belongs to.
TRAINING_LABEL = f"{API_GROUP}/training"
#: The prefix of the engine pod template's annotations that carry a file the engine reads (resources/engine.py).
FILE_ANNOTATION_PREFIX = f"{API_GROUP}/file."
#: The training stage a Job runs.
STAGE_LABEL = f"{API_GROUP}/training-stage"
#: The training's spec generation the generation engine was rendered for.
TRAINING_GENERATION_LABEL = f"{API_GROUP}/training-generation"
#: The DrafterBenchmark a Job runs.
BENCHMARK_LABEL = f"{API_GROUP}/benchmark"
#: The revision a gate DrafterBenchmark measures before its swap.
GATE_LABEL = f"{API_GROUP}/gate"
#: The comparing DrafterBenchmark (spec.candidates) a candidate's own DrafterBenchmark belongs to.
COMPARISON_LABEL = f"{API_GROUP}/comparison"
#: On a DrafterTraining a serving's spec.retraining started: the serving (the owner reference says so too; the label
#: is what the operator lists them by).
RETRAINING_LABEL = f"{API_GROUP}/retraining-of"

#: Label keys a user's own pod labels must not use (api/pod.py refuses them): the operator's selectors.
OPERATOR_LABEL_PREFIX = f"{API_GROUP}/"

# --------------------------------------------------------------------------------------------------
# Annotations: what a person (or kubectl drafter) reads or writes on an object.

#: The engine ("vllm" or "sglang") an endpoint runs, on gate benchmarks and engine Deployments.
ENGINE_ANNOTATION = f"{API_GROUP}/engine"
#: What the endpoint runs, for a benchmark's DRAFTER column (resources/labels.drafter_summary).
DRAFTER_ANNOTATION = f"{API_GROUP}/drafter"
#: The speculative tokens per step the measured revision drafts.
K_ANNOTATION = f"{API_GROUP}/num-speculative-tokens"
#: "true" on a gate benchmark whose endpoint runs its engine's deterministic mode (engines.deterministic_mode).
DETERMINISTIC_ANNOTATION = f"{API_GROUP}/deterministic"
#: On the Service: the revision it pointed at before the last switch, and when it switched.
PREVIOUS_REVISION_ANNOTATION = f"{API_GROUP}/previous-revision"
SWITCHED_AT_ANNOTATION = f"{API_GROUP}/switched-at"
# On the Service: every revision traffic left whose drain had not ended at the last switch, with when traffic left
# it (JSON {revision: time}): a second swap within a drain must not cut the first one's streams.
DRAINS_ANNOTATION = f"{API_GROUP}/draining"
#: A new value starts a serving's failed revision again (kubectl drafter retry).
RETRY_ANNOTATION = f"{API_GROUP}/retry"
# On a gate DrafterBenchmark: the retry annotation's value it was run for (a failed gate from before a retry is stale).
GATE_ATTEMPT_ANNOTATION = f"{API_GROUP}/gate-attempt"
#: The one-shot BlueGreen promotion a DrafterTraining asks of a serving.
PROMOTION_ANNOTATION = f"{API_GROUP}/promotion"
#: On a serving: the training whose drafter it serves.
PROMOTED_BY_ANNOTATION = f"{API_GROUP}/promoted-by"
#: On a serving with spec.retraining: a new value starts a retraining now (kubectl annotate ... drafter.dev/retrain=$(date +%s)).
RETRAIN_ANNOTATION = f"{API_GROUP}/retrain"
#: On a DrafterTraining a serving started: what started it (Requested, DriftDetected, Interval).
RETRAINING_TRIGGER_ANNOTATION = f"{API_GROUP}/retraining-trigger"
#: On a serving, set by a DrafterTraining's Promote: the length it trained the drafter at, bound to the drafter
#: (JSON {by, model, contentDigest, maxLength}). A drafter checkpoint does not record it: speculators and SpecForge
#: copy max_position_embeddings from the target's config. What the LengthCovered condition holds maxModelLen to.
TRAINED_LENGTH_ANNOTATION = f"{API_GROUP}/trained-length"
#: On a Deployment: the serving generation and the pod settings its template was rendered from.
SERVING_GENERATION_ANNOTATION = f"{API_GROUP}/serving-generation"
POD_SETTINGS_ANNOTATION = f"{API_GROUP}/pod-settings"
#: kopf's progress and diff-base annotations are kept under the group's prefix.
KOPF_ANNOTATION_PREFIX = API_GROUP

# --------------------------------------------------------------------------------------------------
# Engines and speculative methods: every list of them is derived from these literals.

#: The engines' names, the API's Literal type (the CRDs' enum). Everything else about an engine lives in its module
#: under engines/ (engines.ENGINES holds them in this order: tests/unit/root/test_constants.py).
Engine = Literal["vllm", "sglang"]
ENGINES: tuple[str, ...] = get_args(Engine)

#: The drafter methods spec.drafter.method accepts ("none": no speculation). Everything else about a method lives
#: on its record in families.py (FAMILIES holds the speculative ones in this order: tests/unit/root/test_families.py).
DrafterMethod = Literal["eagle3", "eagle", "mtp", "ngram", "ngramGpu", "suffix", "dflash", "dspark", "draftModel", "none"]
DRAFTER_METHODS: tuple[str, ...] = get_args(DrafterMethod)
#: The drafter families a DrafterTraining trains (spec.method); a trained drafter is served with the same
#: spec.drafter.method. The families whose record says trained, in order (tests/unit/root/test_families.py).
TrainedMethod = Literal["eagle3", "dflash", "dspark"]
TRAINED_METHODS: tuple[str, ...] = get_args(TrainedMethod)
#: The methods that speculate (every one but "none"): the families of families.FAMILIES, in its order.
SPECULATIVE_METHODS: tuple[str, ...] = tuple(method for method in DRAFTER_METHODS if method != "none")
#: The methods that load a drafter model of their own (spec.drafter.model required), the chain drafters before
#: the block drafters: the order the CRD's rule and message name them in.
METHODS_WITH_MODEL: tuple[str, ...] = tuple(sorted(families.methods(weights=("own",)),
                                                   key=lambda method: families.family(method).drafting == "block"))
#: The methods that draft from the text itself, with no model (spec.drafter.model forbidden).
METHODS_WITHOUT_MODEL: tuple[str, ...] = families.methods(weights=("text",))
#: The methods whose drafter weights may live in the target's checkpoint (spec.drafter.model optional, and may
#: equal spec.target.model): mtp (the target's MTP layers), dspark (bundled DSpark weights, as
#: DeepSeek-V4.1-Flash ships them).
METHODS_IN_TARGET: tuple[str, ...] = families.methods(weights=("target", "own-or-target"))
#: The methods that always draft with the target's own layers: a drafter given anyway is not used (mtp).
METHODS_OF_TARGET_ONLY: tuple[str, ...] = families.methods(weights=("target",))
#: The block drafters: one forward drafts a block of k tokens (DFlash, DSpark); their k is
#: spec.drafter.numSpeculativeTokens on every engine, checked against the trained block by the preflight.
BLOCK_METHODS: tuple[str, ...] = families.methods(drafting=("block",))
#: The methods that draft by looking the context up: no drafter forward, so no draft cost.
LOOKUP_METHODS: tuple[str, ...] = families.methods(drafting=("lookup",))
#: The methods the preflight has checkpoint rules for (preflight/rules: each family's checks).
CHECKED_METHODS: tuple[str, ...] = families.methods(checked=True)

# --------------------------------------------------------------------------------------------------
# Ports

#: Where the operator serves its own /metrics unless told otherwise (`drafter-operator run --metrics-port`;
#: the chart's metrics.port defaults to the same).
OPERATOR_METRICS_PORT = 8080

#: How a benchmark's requests name themselves (the engine's CLIENT_REQUEST_ID_FIELD, then a random suffix), so a
#: serving's capture leaves them out: a gate's or Evaluate's prompts are not the traffic a drafter retrains on.
BENCHMARK_REQUEST_ID_PREFIX = "drafter-benchmark-"

#: Prompts of each traffic category a benchmark takes from a serving's held-out captured prompts unless told otherwise
#: (the first captured): a measurement by category sends each of them once, one at a time.
CAPTURED_PER_CATEGORY = 8
