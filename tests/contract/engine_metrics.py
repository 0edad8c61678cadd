"""Helper run by the contract tier in the engines' environment: the metric families the real engines register.

    $DRAFTER_ENGINE_PYTHON tests/contract/engine_metrics.py vllm MODEL_NAME K
    $DRAFTER_CLIENTS_PYTHON tests/contract/engine_metrics.py sglang -- <launch_server flags>

prints one JSON object on stdout: ``{"families": {name: {type, documentation, labels, buckets}},
"exposition": <the /metrics text right after start-up>}``.

The engines' own collector classes are instantiated on CPU, as the servers do at start-up:
- vLLM 0.33.0: ``vllm.v1.metrics.loggers.PrometheusStatLogger`` with a default ``VllmConfig`` whose
  model config is replaced by the three attributes the logger reads (served name, max_model_len,
  is_diffusion: a real ``ModelConfig`` needs the model's files) and a speculative config carrying
  ``num_speculative_tokens`` (all ``SpecDecodingProm`` reads);
- SGLang 0.5.23: ``prepare_server_args(argv)`` published with ``get_context().set_server_args`` (as
  the launcher does), then ``SchedulerMetricsCollector.init_new`` and ``TokenizerMetricsCollector``
  with ``tokenizer_metric_labels()`` and the observability buckets, as ``TokenizerManager`` does.
  SGLang's config bags import its multimodal helpers and custom logit processors, which need
  torchvision and dill: run the SGLang half with the clients' python (``.ci/clients-env``), which
  has them on top of the engines' environment. The single-GPU ranks the launcher would stamp are
  stated with ``get_parallel().override_permanently``.
"""

from __future__ import annotations

import json
import os
import sys
import types


def families(registry) -> dict[str, dict]:
    """Name -> type, help, label names and bucket bounds of every collector in ``registry``."""
    out: dict[str, dict] = {}
    for collector in set(registry._names_to_collectors.values()):
        name = getattr(collector, "_name", None)
        if name is None:
            continue
        bounds = getattr(collector, "_upper_bounds", None)
        out[name] = {
            "type": collector._type,
            "documentation": collector._documentation,
            "labels": sorted(collector._labelnames),
            "buckets": None if bounds is None else [b if b != float("inf") else "+Inf" for b in bounds],
        }
    return out


def vllm_families(model_name: str, k: int) -> object:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.config import VllmConfig
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    config = VllmConfig()
    model = types.SimpleNamespace(served_model_name=model_name, max_model_len=131072, is_diffusion=False)
    object.__setattr__(config, "model_config", model)
    if k > 0:
        object.__setattr__(config, "speculative_config", types.SimpleNamespace(num_speculative_tokens=k))
    PrometheusStatLogger(config, [0])


def sglang_families(argv: list[str]) -> object:
    from sglang.srt.observability.metrics_collector import (
        SchedulerMetricsCollector,
        TokenizerMetricsCollector,
        tokenizer_metric_labels,
    )
    from sglang.srt.runtime_context import get_context, get_observability, get_parallel
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    get_context().set_server_args(server_args)
    # A single-GPU scheduler's ranks (the launcher stamps them when it builds the process groups).
    get_parallel().override_permanently(tp_rank=0, pp_rank=0, moe_ep_rank=0, attn_tp_rank=0, attn_cp_rank=0,
                                           dp_rank=None)
    SchedulerMetricsCollector.init_new(server_args=server_args, enable_priority_scheduling=False,
                                       enable_lora=False, enable_hierarchical_cache=False)
    obs = get_observability()
    TokenizerMetricsCollector(server_args=server_args, labels=tokenizer_metric_labels(),
                              bucket_time_to_first_token=obs.bucket_time_to_first_token,
                              bucket_e2e_request_latency=obs.bucket_e2e_request_latency,
                              bucket_inter_token_latency=obs.bucket_inter_token_latency)


def main(argv: list[str]) -> int:
    from prometheus_client import REGISTRY, generate_latest

    engine = argv[0]
    if engine == "vllm":
        vllm_families(argv[1], int(argv[2]))
    elif engine == "sglang":
        sglang_families(argv[argv.index("--") + 1:])
    else:
        print(f"unknown engine {engine!r}", file=sys.stderr)
        return 2
    json.dump({"families": families(REGISTRY), "exposition": generate_latest(REGISTRY).decode()}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
