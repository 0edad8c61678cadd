"""CPU substitution: capture a target's hidden states with a Hugging Face forward pass.

Both frameworks capture hidden states through an inference engine that needs a GPU: SpecForge's
``scripts/prepare_hidden_states.py`` loads the target in a patched SGLang model runner, speculators'
``generate-offline-data`` asks a vLLM server whose hidden-states connector uses CUDA streams and
pinned memory. This adapter runs the target with transformers instead (``output_hidden_states``) and
writes the SAME files in the SAME format each framework's capture writes:

    python hf_hidden_states.py specforge   <the arguments of SpecForge's scripts/prepare_hidden_states.py>
    python hf_hidden_states.py speculators <the arguments of `speculators generate-offline-data`>
                                           --model TARGET --target-layer-ids A B C [--include-last-layer]

* ``specforge``: everything but the forward pass is SpecForge's own code from its wheel (dataset
  building with its chat templates and loss masks, capture-layer resolution, the vocabulary mapping,
  the persisted record layout): ``rows_<g>-<g+N>/data_<i>.ckpt`` holding ``input_ids [T]``,
  ``loss_mask [T]``, ``aux_hidden_state [1, T, 3H]`` and ``hidden_state [1, T, H]`` plus
  ``vocab_mapping/vocab_mapping.pt``. SGLang captures layer id ``i`` as the input of layer ``i+1``
  (its llama model adds 1), i.e. the output of layer ``i`` (before the next layer's norm); the
  final state is the normed ``last_hidden_state``.
* ``speculators``: reads the ``prepare-data`` dataset with speculators' own ``build_client_item``
  and writes ``hs_<i>.safetensors`` with ``token_ids [T]`` and ``hidden_states [T, L, H]`` as vLLM's
  ``ExampleHiddenStatesConnector`` does; vLLM captures layer id ``i`` as the input of layer ``i``
  (the residual stream after layer ``i-1``), and the id ``num_hidden_layers`` (which speculators'
  ``launch_vllm.py`` appends) is the last layer's output before the final norm. Outputs are checked
  with speculators' ``check_hidden_states``.

Self-contained on purpose (torch, transformers, datasets, safetensors and the framework): it runs in a
stock framework image, mounted beside the stage's other files. One process, on the CPU; ``HF_HIDDEN_STATES_DEVICE``
(e.g. ``cuda``) runs the same forward on that device instead, which is how bench/gpu_training.py holds the CPU
capture to a GPU one (the records are written from CPU copies either way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
from pathlib import Path


def _load_target(path: str, trust_remote_code: bool):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    model.to(os.environ.get("HF_HIDDEN_STATES_DEVICE") or "cpu")
    model.eval()
    return config, model


def _forward(model, input_ids, attention_mask=None):
    """(residual stream, final normed hidden state) of one forward pass.

    ``stream[i]`` is the input of decoder layer ``i`` (``stream[0]`` the embeddings, ``stream[N]`` the
    last layer's output before the final norm), taken with forward hooks on the decoder layers:
    transformers' own ``hidden_states`` tuple ends with the normed state instead.
    """
    import torch

    layers = model.model.layers
    outputs: list = [None] * len(layers)

    def keep(index):
        def hook(_module, _inputs, output):
            outputs[index] = output[0] if isinstance(output, tuple) else output
        return hook

    device = next(model.parameters()).device
    handles = [layer.register_forward_hook(keep(i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            out = model.model(input_ids=input_ids.to(device), output_hidden_states=True,
                              attention_mask=None if attention_mask is None else attention_mask.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return [state.cpu() for state in (out.hidden_states[0], *outputs)], out.last_hidden_state.cpu()


# ------------------------------------------------------------------------------------------------
# SpecForge: scripts/prepare_hidden_states.py
# ------------------------------------------------------------------------------------------------

def specforge_parser() -> argparse.ArgumentParser:
    """The argument parser of SpecForge's scripts/prepare_hidden_states.py (same names and defaults)."""
    parser = argparse.ArgumentParser(prog="hf_hidden_states.py specforge")
    parser.add_argument("--target-model-path", type=str, required=True)
    parser.add_argument("--strategy", type=str, default="eagle3")
    parser.add_argument("--draft-model-config", type=str, default=None)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--data-path", type=str, required=True)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--chat-template", type=str, default="llama3")
    parser.add_argument("--is-preformatted", action="store_true")
    parser.add_argument("--num-samples", type=int, default=None)
    parser.add_argument("--build-dataset-num-proc", type=int, default=8)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-dir", type=str, default="./cache")
    parser.add_argument("--output-path", type=str, default=None)
    parser.add_argument("--dist-timeout", type=int, default=2000)
    parser.add_argument("--num-io-threads", type=int, default=None)
    parser.add_argument("--num-workers", type=int, default=4)
    parser.add_argument("--io-queue-size", type=int, default=50)
    parser.add_argument("--file-group-size", type=int, default=2000)
    parser.add_argument("--compress", action="store_true")
    parser.add_argument("--compression-level", type=int, default=6)
    # The SGLang engine's settings: accepted so the same argv runs either program, unused here.
    parser.add_argument("--sglang-attention-backend", default="flashinfer")
    parser.add_argument("--sglang-mem-fraction-static", type=float, default=0.4)
    parser.add_argument("--sglang-context-length", type=int, default=None)
    for flag in ("nccl-nvls", "symm-mem", "torch-compile", "dp-attention", "dp-lm-head"):
        parser.add_argument(f"--sglang-enable-{flag}", action="store_true")
    parser.add_argument("--sglang-ep-size", type=int, default=1)
    return parser


def _single_process_distributed() -> None:
    """SpecForge's helpers want a process group: one gloo rank on the CPU."""
    os.environ.setdefault("SPECFORGE_DEVICE", "cpu")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def _draft_vocab_size(path: str) -> int:
    payload = json.loads(Path(path).read_text())
    value = payload.get("draft_vocab_size", payload.get("vocab_size"))
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"draft model config {path!r} must define a positive draft_vocab_size")
    return value


def specforge_arguments(argv: list[str]) -> argparse.Namespace:
    """SpecForge's arguments, refused at once where this one CPU process cannot honour them."""
    args = specforge_parser().parse_args(argv)
    if args.tp_size != 1:
        raise SystemExit("hf_hidden_states: one process on the CPU: --tp-size must be 1")
    if args.draft_model_config is None:
        raise SystemExit("hf_hidden_states: --draft-model-config is required (it gives draft_vocab_size)")
    return args


def vocab_sizes(config, draft_model_config: str) -> tuple[int, int]:
    """(target vocab size, draft vocab size); the draft's may not exceed the target's."""
    target_vocab_size = int(getattr(config, "text_config", config).vocab_size)
    draft_vocab_size = _draft_vocab_size(draft_model_config)
    if draft_vocab_size > target_vocab_size:
        raise ValueError(f"draft_vocab_size={draft_vocab_size} exceeds target vocab_size={target_vocab_size}")
    return target_vocab_size, draft_vocab_size


def dataset_cache_key(args: argparse.Namespace) -> str:
    """The processed dataset's cache key, built from the same fields as SpecForge's script builds it."""
    return hashlib.md5(f"{args.data_path}-{args.max_length}-{args.chat_template}-{args.target_model_path}-"
                       f"{args.num_samples}-{args.is_preformatted}".encode()).hexdigest()


def record_path(output: str, index: int, file_group_size: int, compress: bool) -> str:
    """Where record ``index`` goes: ``rows_<g>-<g+N>/data_<i>.ckpt[.gz]``, N records to a directory."""
    group = (index // file_group_size) * file_group_size
    extension = ".ckpt.gz" if compress else ".ckpt"
    return os.path.join(output, f"rows_{group}-{group + file_group_size}", f"data_{index}{extension}")


def _capture_plan(args: argparse.Namespace, config, output: str):
    """SpecForge's own resolution of what to capture (layers, record layout, loss-mask filter)."""
    from specforge.application import resolve_offline_capture
    from specforge.config import Config

    cfg = Config(
        model={"target_model_path": args.target_model_path, "draft_model_config": args.draft_model_config,
               "trust_remote_code": args.trust_remote_code, "cache_dir": args.cache_dir},
        data={"hidden_states_path": output, "max_length": args.max_length},
        training={"strategy": args.strategy},
    )
    return resolve_offline_capture(cfg, target_config=config)


def _eagle3_dataset(args: argparse.Namespace, plan):
    """The conversations tokenized with SpecForge's chat template and loss masks, cut to --num-samples
    (before building, or after it where the plan filters samples by their loss mask)."""
    from datasets import Dataset
    from specforge.data.preprocessing import build_eagle3_dataset
    from specforge.utils import load_tokenizer, safe_conversations_generator

    dataset = Dataset.from_generator(
        generator=safe_conversations_generator, gen_kwargs={"file_path": args.data_path},
        cache_dir=os.path.join(args.cache_dir, "hf_dataset"), num_proc=min(args.build_dataset_num_proc, 32))
    if args.num_samples is not None and plan.loss_mask_filter is None:
        dataset = dataset.select(range(min(args.num_samples, len(dataset))))
    tokenizer = load_tokenizer(args.target_model_path, trust_remote_code=args.trust_remote_code)
    eagle3_dataset = build_eagle3_dataset(
        dataset=dataset, tokenizer=tokenizer, chat_template=args.chat_template, max_length=args.max_length,
        cache_dir=os.path.join(args.cache_dir, "processed_dataset"), cache_key=dataset_cache_key(args),
        is_preformatted=args.is_preformatted, num_proc=args.build_dataset_num_proc,
        loss_mask_filter=plan.loss_mask_filter)
    if plan.loss_mask_filter is not None and args.num_samples is not None:
        eagle3_dataset = eagle3_dataset.select(range(min(args.num_samples, len(eagle3_dataset))))
    if not len(eagle3_dataset):
        raise ValueError(f"no samples satisfy {plan.run.algorithm.name} training eligibility")
    return eagle3_dataset


def _write_vocab_mapping(eagle3_dataset, output: str, target_vocab_size: int, draft_vocab_size: int) -> None:
    from specforge.data.preprocessing import generate_vocab_mapping_file

    mapping_dir = os.path.join(output, "vocab_mapping")
    temporary = generate_vocab_mapping_file(
        dataset=eagle3_dataset, target_vocab_size=target_vocab_size, draft_vocab_size=draft_vocab_size,
        cache_dir=mapping_dir, cache_key=f".vocab_mapping.{os.getpid()}")
    os.replace(temporary, os.path.join(mapping_dir, "vocab_mapping.pt"))


def _save_record(record: dict, path: str, args: argparse.Namespace) -> bool:
    """Write one record (False, and a warning, for one with a NaN: SpecForge skips those too)."""
    import gzip

    import torch

    os.makedirs(os.path.dirname(path), exist_ok=True)
    if any(torch.is_floating_point(t) and bool(torch.isnan(t).any()) for t in record.values()):
        print(f"Warning: NaN in {path}. Skipping save.", flush=True)
        return False
    if args.compress:
        with gzip.open(path, "wb", compresslevel=args.compression_level) as f:
            torch.save(record, f)
    else:
        torch.save(record, path)
    return True


def _write_records(model, loader, plan, args: argparse.Namespace, output: str, total: int) -> int:
    """Forward every batch and write each row's record in SpecForge's layout; how many were written."""
    import torch

    layers = list(plan.capture_layers)
    index = written = 0
    for batch in loader:
        stream, last = _forward(model, batch["input_ids"], batch["attention_mask"])
        aux = torch.cat([stream[layer + 1] for layer in layers], dim=-1)
        for row in range(batch["input_ids"].size(0)):
            length = int(batch["attention_mask"][row].sum())  # SGLang sees the row unpadded
            record = plan.layout.materialize({
                "input_ids": batch["input_ids"][row].clone(),
                "loss_mask": batch["loss_mask"][row].clone(),
                "aux_hidden_states": aux[row, :length].clone().unsqueeze(0),
                "last_hidden_states": last[row, :length].clone().unsqueeze(0),
            })
            path = record_path(output, index, args.file_group_size, args.compress)
            index += 1
            written += _save_record(record, path, args)
        # One line per batch: what run-stage's progress parser reads (training/progress.py).
        print(f"hf_hidden_states: extracted {index}/{total} samples", flush=True)
    return written


def specforge_main(argv: list[str]) -> int:
    import torch.distributed as dist
    from specforge.data.utils import prepare_dp_dataloaders
    from specforge.distributed import destroy_distributed, get_dp_group, init_distributed

    args = specforge_arguments(argv)
    output = args.output_path or os.path.join(args.cache_dir, "hidden_states")
    config, model = _load_target(args.target_model_path, args.trust_remote_code)
    plan = _capture_plan(args, config, output)
    target_vocab_size, draft_vocab_size = vocab_sizes(config, args.draft_model_config)
    print(f"hf_hidden_states: {plan.run.algorithm.name} capture layers {list(plan.capture_layers)} "
          "(SGLang ids: outputs of those layers)", flush=True)

    _single_process_distributed()
    init_distributed(timeout=args.dist_timeout, tp_size=1)
    try:
        eagle3_dataset = _eagle3_dataset(args, plan)
        _write_vocab_mapping(eagle3_dataset, output, target_vocab_size, draft_vocab_size)
        loader = prepare_dp_dataloaders(dataset=eagle3_dataset, batch_size=args.batch_size, num_workers=0,
                                        shuffle=False, process_group=get_dp_group())
        written = _write_records(model, loader, plan, args, output, len(eagle3_dataset))
        dist.barrier()
        print(f"hf_hidden_states: wrote {written} records and vocab_mapping.pt to {output}", flush=True)
    finally:
        destroy_distributed()
    return 0


# ------------------------------------------------------------------------------------------------
# speculators: `speculators generate-offline-data` against vLLM's extract_hidden_states
# ------------------------------------------------------------------------------------------------

def speculators_parser() -> argparse.ArgumentParser:
    """`speculators generate-offline-data`'s options, plus what vLLM's launch_vllm.py is given."""
    parser = argparse.ArgumentParser(prog="hf_hidden_states.py speculators")
    parser.add_argument("--model", required=True, help="the target (launch_vllm.py's MODEL)")
    parser.add_argument("--target-layer-ids", type=int, nargs="+", default=None)
    parser.add_argument("--include-last-layer", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--preprocessed-data", default="./output")
    parser.add_argument("--output", default=None)
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--validate-outputs", action="store_true")
    # generate-offline-data's remaining options, accepted and unused (no server here).
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--request-timeout", type=float, default=None)
    parser.add_argument("--max-retries", type=int, default=None)
    parser.add_argument("--fail-on-error", action="store_true")
    parser.add_argument("--max-consecutive-errors", type=int, default=None)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    return parser


def speculators_main(argv: list[str]) -> int:
    import torch
    from datasets import load_from_disk
    from safetensors.torch import load_file, save_file
    from speculators.data_generation.offline import (
        check_hidden_states,
        get_existing_hidden_state_indices,
        get_indices_to_process,
    )
    from speculators.train.data import build_client_item

    args = speculators_parser().parse_args(argv)
    config, model = _load_target(args.model, args.trust_remote_code)
    num_layers = getattr(config, "text_config", config).num_hidden_layers
    # launch_vllm.py: the default ids, and the final layer appended (vLLM's id num_hidden_layers).
    layers = list(args.target_layer_ids or [2, num_layers // 2, num_layers - 3])
    if args.include_last_layer and num_layers not in layers:
        layers.append(num_layers)
    dataset = load_from_disk(args.preprocessed_data)
    out = Path(args.output) if args.output else Path(args.preprocessed_data) / "hidden_states"
    out.mkdir(parents=True, exist_ok=True)
    todo = get_indices_to_process(len(dataset), args.max_samples, get_existing_hidden_state_indices(out),
                                  args.world_size, args.rank)
    print(f"hf_hidden_states: vLLM layer ids {layers} (inputs of those layers; {num_layers}: the last output)", flush=True)
    for done, i in enumerate(todo, 1):
        token_ids = build_client_item(dataset[i])["input_ids"]
        ids = torch.tensor([token_ids])
        stream, _last = _forward(model, ids)
        states = [stream[layer][0] for layer in layers]
        path = out / f"hs_{i}.safetensors"
        save_file({"token_ids": ids[0].contiguous(), "hidden_states": torch.stack(states, dim=1).contiguous()},
                  str(path))
        if args.validate_outputs:
            check_hidden_states(load_file(str(path)), token_ids)
        # One line per sample: what run-stage's progress parser reads (training/progress.py).
        print(f"hf_hidden_states: extracted {done}/{len(todo)} samples", flush=True)
    print(f"hf_hidden_states: wrote {len(todo)} hs_<i>.safetensors to {out}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("specforge", "speculators"):
        print("usage: hf_hidden_states.py specforge|speculators ARGS...", file=sys.stderr)
        return 2
    return specforge_main(argv[1:]) if argv[0] == "specforge" else speculators_main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
