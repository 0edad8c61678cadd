"""What the operator checks in a DrafterServingSpec and the apiserver cannot (filed as a condition by the
controller)."""

from __future__ import annotations

import re

from drafter_operator.api.serving.spec import DrafterServingSpec
from drafter_operator.constants import ENGINES
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.engines import engine as engine_module
from drafter_operator.images import image_repository

_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_KEY_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why a label key is invalid, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "has more than one '/'"
    if prefix and (len(prefix) > 253 or not _LABEL_KEY_PREFIX.match(prefix)):
        return "has an invalid prefix (a lowercase DNS subdomain of at most 253 characters)"
    if not name or len(name) > 63 or not _LABEL_KEY_NAME.match(name):
        return "has an invalid name (at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric)"
    return None


# What serving_problems() checks, for docs/api.md (one line per check).
SERVING_OPERATOR_CHECKS: tuple[str, ...] = (
    "spec.target.extraArgs starts with a --flag (a leading value would be taken as the model or a stray argument).",
    "spec.target.extraArgs has no item holding a flag and its value separated by a space (split them into two items).",
    "spec.target.extraArgs sets no flag twice.",
    "spec.target.extraArgs parses with the engine's own rules (flag table of vLLM 0.33.0 / SGLang 0.5.23: unique "
    "prefixes, vLLM's underscores, dotted keys and --no- forms) and reaches no destination the operator owns "
    "(flags unknown to that version are refused only with the default image).",
    "spec.target.toolCallParser and reasoningParser are names the engine registers.",
    "spec.drafter with method ngram on sglang sets neither numSteps nor eagleTopk (SGLang replaces both); "
    "on sglang, numSteps is set whenever eagleTopk or numDraftTokens is.",
    "spec.image is not named after the other engine (e.g. an sglang image with engine vllm).",
    "spec.placement.nodeSelector keys are valid label keys.",
    "spec.resources.gpusPerReplica (the GPUs of each of a replica's pods, one pod per node) fits on one node; a "
    "replica spans nodes with spec.resources.nodesPerReplica.",
    "with spec.capture, spec.target.extraArgs sets none of the engine's request logging (SGLang --log-requests*; "
    "vLLM --enable-log-requests, --enable-log-outputs, --enable-log-deltas, --max-log-len, --logging-config, "
    "--log-config-file): spec.capture sets it; on vllm, spec.env sets none of VLLM_CONFIGURE_LOGGING, "
    "VLLM_LOGGING_CONFIG_PATH and VLLM_REQUEST_BODY_LOG_LEVEL.",
    "spec.target.extraArgs sets no flag a parallel field that is set renders (SGLang --attn-dp-size and --ep-size, "
    "vLLM --enable-expert-parallel beside spec.target.dataParallelSize or expertParallel).",
    "with engine sglang, spec.target.pipelineParallelSize above 1 and a drafter come with SGLANG_ENABLE_PP_SPEC=1 in "
    "spec.env, and dataParallelSize above 1 with method dflash or dspark with --enable-dp-lm-head in extraArgs.",
)


def serving_problems(spec: DrafterServingSpec, *, gpus_per_node: int | None = None) -> list[str]:
    """Problems the apiserver cannot detect, each naming the field and the fix. Empty means valid.

    `gpus_per_node` (the GPU count of the nodes the serving may use, when the caller knows it) enables
    the capacity checks. The apiserver has already enforced everything in the CRD schema.
    """
    args = list(spec.target.extra_args or [])
    shape, repeats = extra_args_shape_problems(args), extra_args_repeat_problems(args)
    problems = [message for _, message in sorted(shape + repeats, key=lambda item: item[0])]  # in list order
    # What the engine itself would refuse or reinterpret (its flag table and parser registries); its parser
    # reads a well-shaped list only.
    module = engine_module(spec.engine)
    if not shape:
        default_image = spec.image is None or spec.image == DEFAULT_IMAGES[spec.engine]
        problems += module.extra_args_problems(args, known_flags_only=default_image, capture=spec.capture is not None)
    problems += module.spec_problems(spec)
    problems += image_engine_problems(spec.engine, spec.image)
    problems += node_selector_problems(spec.placement.node_selector if spec.placement else None)
    problems += capacity_problems(spec.resources.gpus_per_replica, gpus_per_node)
    return problems


def extra_args_shape_problems(args: list[str]) -> list[tuple[int, str]]:
    """(index, problem): the list starts with a flag, and no item holds a flag and its value separated by a space."""
    problems = []
    for index, arg in enumerate(args):
        where = f"spec.target.extraArgs[{index}]"
        if index == 0 and not arg.startswith("-"):
            problems.append((index, f"{where} {arg!r} is not a flag: extraArgs must start with a --flag (values follow their flag)"))
        if arg.startswith("--") and " " in arg.split("=")[0]:
            # The flag only: the value may be a secret, and this message reaches status and Events.
            problems.append((index, f"{where} {arg.split(' ', 1)[0]!r} holds a flag and its value in one item: split it into two items"))
    return problems


def extra_args_repeat_problems(args: list[str]) -> list[tuple[int, str]]:
    """(index, problem): no flag is given twice (an item holding a space is a shape problem, not counted here)."""
    problems = []
    seen: dict[str, int] = {}
    for index, arg in enumerate(args):
        flag = arg.split("=")[0]
        if not arg.startswith("--") or " " in flag:
            continue
        if flag in seen:
            problems.append((index, f"spec.target.extraArgs[{index}] repeats {flag} (first at extraArgs[{seen[flag]}]): keep one"))
        else:
            seen[flag] = index
    return problems


def image_engine_problems(engine: str, image: str | None) -> list[str]:
    """An image named after another engine is almost certainly a mistake."""
    repository = image_repository(image).lower() if image else ""
    for other in ENGINES:
        if other != engine and other in repository and engine not in repository:
            return [f"spec.image {image!r} looks like a {other} image but spec.engine is {engine}: fix one of them"]
    return []


def node_selector_problems(node_selector: dict[str, str] | None) -> list[str]:
    """The node selector's keys are label keys (its values are checked by the schema)."""
    return [
        f"spec.placement.nodeSelector key {key!r} {reason}: use a valid label key such as nvidia.com/gpu.product"
        for key in node_selector or {}
        if (reason := label_key_problem(key))
    ]


def capacity_problems(gpus_per_replica: int, gpus_per_node: int | None) -> list[str]:
    """Each pod of a replica runs on one node, whatever the nodes the replica spans: its GPUs must fit on one (when
    the node size is known)."""
    if gpus_per_node is None or gpus_per_replica <= gpus_per_node:
        return []
    return [
        f"spec.resources.gpusPerReplica {gpus_per_replica} exceeds the {gpus_per_node} GPUs of one node: it is the "
        "GPUs of each of a replica's pods, one pod per node; lower it to the GPUs of a node and spread the replica "
        "over nodes with spec.resources.nodesPerReplica (tensorParallelSize x pipelineParallelSize x "
        "dataParallelSize = gpusPerReplica x nodesPerReplica)"
    ]
