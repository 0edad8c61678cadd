"""Hugging Face hub ids in an emulated engine's command line: the hub cache, offline mode, a simulated download.

A model reference (vLLM's ``model_tag``/``--model`` and the ``model`` of ``--speculative-config``; SGLang's
``--model-path`` and ``--speculative-draft-model-path``) is one of:

- a **local path** (absolute, or a path that exists): not checked, as before; the emulator reads no model
  files (the local test cluster keeps the container's paths, which need not exist on the host);
- a **hub id** ``org/name`` (huggingface_hub's repo id rule with the namespace required): looked up in the
  hub cache like huggingface_hub looks it up (``refs/<revision>`` names a commit, ``snapshots/<commit>/``
  holds ``config.json``). Found: served from the cache. Not found and ``HF_HUB_OFFLINE`` on: the start
  fails with the engine's own error (:func:`offline_error`), exit status 1, before the startup delay. Not
  found and online: the real engine downloads; there is no network here, so the emulator waits
  ``DRAFTER_EMULATOR_DOWNLOAD_SECONDS`` of wall time and writes an emulated cache entry
  (``models--org--name/snapshots/emulated/config.json`` and ``refs/main``), which the next start finds;
- anything else (a single name such as ``gpt2``, a legacy hub id without a namespace): not checked, as
  before (reported as ``unchecked``).

The emulator writes its entries only into a cache the environment names (``HF_HUB_CACHE``,
``HUGGINGFACE_HUB_CACHE`` or ``HF_HOME``, as the operator sets for a cache volume): the default
``~/.cache/huggingface/hub`` is the account's own cache on a developer machine, and a fake entry there
would shadow the real model for real libraries offline. A pod without a cache volume starts with an empty
container filesystem, so a real engine downloads again on every start there too.

Everything but :func:`resolve_models` is a pure function of its arguments.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from drafter_testbed.emulator.cmdline import EngineConfig

#: ``huggingface_hub.constants.ENV_VARS_TRUE_VALUES``; ``_is_true`` compares ``value.upper()`` (no strip).
TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
#: ``huggingface_hub.constants.DEFAULT_REVISION``.
DEFAULT_REVISION = "main"
#: The snapshot directory (and the commit ``refs/<revision>`` names) of an emulated download.
EMULATED_COMMIT = "emulated"
#: What the emulator leaves out of the environment names it reports: its own knobs.
EMULATOR_ENV_PREFIX = "DRAFTER_EMULATOR_"
#: Variables that name a Hugging Face cache explicitly; the emulator writes only into such a cache.
CACHE_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME")

#: ``huggingface_hub.utils._validators.REPO_ID_REGEX`` with the namespace required (``org/name``).
_HUB_ID = re.compile(r"\b[\w\-.]{1,96}\b/\b[\w\-.]{1,96}\b", re.ASCII)
#: ``huggingface_hub.file_download.REGEX_COMMIT_HASH``: a revision that is already a commit.
_COMMIT_HASH = re.compile(r"[0-9a-f]{40}")
_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)

# The errors the real engines print when HF_HUB_OFFLINE is on and a hub id is not in the cache: the last
# line(s) of their tracebacks, reproduced with the engine packages (vLLM 0.33.0, SGLang 0.5.23,
# transformers 5.19.0, huggingface_hub 1.33.0), HF_HUB_OFFLINE=1 and an empty HF_HOME. Both exit with 1.
#
# vLLM, target: EngineArgs.__post_init__ replaces a hub id by its cached snapshot when offline
# (vllm/engine/arg_utils.py -> vllm.transformers_utils.repo_utils.get_model_path ->
# huggingface_hub.snapshot_download(repo_id, local_files_only=True, ignore_patterns="*")).
VLLM_TARGET_OFFLINE_ERROR = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the "
    "specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and "
    "downloads online, pass 'local_files_only=False' as input.")
# vLLM, drafter: SpeculativeConfig.__post_init__ builds the draft ModelConfig, whose
# vllm.transformers_utils.config.get_config finds no config.json (file_or_path_exists) and raises ValueError;
# pydantic reports it for SpeculativeConfig. The real message ends with pydantic's
# " [type=value_error, input_value=ArgsKwargs(...), input_type=ArgsKwargs]" trailer, left out here.
VLLM_DRAFTER_OFFLINE_ERROR = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
    "  Value error, Invalid repository ID or local directory specified: '{model}'.\n"
    "Please verify the following requirements:\n"
    "1. Provide a valid Hugging Face repository ID.\n"
    "2. Specify a local directory that contains a recognized configuration file.\n"
    "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
    "   - For Mistral models: ensure the presence of a 'params.json'.")
# SGLang, target and drafter alike: the server-args resolution reads the config with
# sglang.srt.utils.hf_transformers.config.get_config (target: arg_groups/muse_spark_hook.py; drafter:
# arg_groups/speculative_hook.py _resolve_speculative_algorithm_alias) -> transformers
# PreTrainedConfig.get_config_dict -> transformers.utils.hub.cached_files, which turns huggingface_hub's
# LocalEntryNotFoundError into this OSError (transformers' AutoConfig.from_pretrained raises the same).
SGLANG_OFFLINE_ERROR = (
    "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
    "cached files.\nCheck your internet connection or see how to run the library in offline mode at "
    "'https://huggingface.co/docs/transformers/installation#offline-mode'.")


# ------------------------------------------------------------------------------------ environment

def environment_names(env: Mapping[str, str]) -> list[str]:
    """The sorted names of the environment, without the emulator's own ``DRAFTER_EMULATOR_*`` knobs.

    Names only: a value (a hub token from a Secret) never leaves this function.
    """
    return sorted(name for name in env if not name.startswith(EMULATOR_ENV_PREFIX))


def offline_mode(env: Mapping[str, str]) -> bool:
    """``huggingface_hub.constants.HF_HUB_OFFLINE``: ``HF_HUB_OFFLINE``, else (unset or empty)
    ``TRANSFORMERS_OFFLINE``, is one of 1/ON/YES/TRUE in any case."""
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in TRUE_VALUES


def _expanduser(path: str, env: Mapping[str, str]) -> str:
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or os.path.expanduser("~")
        return home + path[1:]
    return os.path.expanduser(path) if path.startswith("~") else path


def _expandvars(path: str, env: Mapping[str, str]) -> str:
    """``os.path.expandvars`` against ``env``: unknown variables stay as written."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1).strip("{}") if match.group(1).startswith("{") else match.group(1)
        return env[name] if name in env else match.group(0)
    return _VARIABLE.sub(value, path)


def hub_cache_dir(env: Mapping[str, str]) -> str:
    """The hub cache as ``huggingface_hub.constants`` resolves it from ``env``.

    ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, where ``HF_HOME`` defaults to
    ``$XDG_CACHE_HOME/huggingface`` and that to ``~/.cache/huggingface``; ``~`` and ``$VAR`` expanded.
    """
    def expand(path: str) -> str:
        return _expandvars(_expanduser(path, env), env)

    default_home = os.path.join(_expanduser("~", env), ".cache")
    hf_home = expand(env.get("HF_HOME", os.path.join(env.get("XDG_CACHE_HOME", default_home), "huggingface")))
    legacy = env.get("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home, "hub"))
    return expand(env.get("HF_HUB_CACHE", legacy))


def cache_configured(env: Mapping[str, str]) -> bool:
    """Whether the environment names a Hugging Face cache (the emulator writes only into such a cache)."""
    return any(name in env for name in CACHE_VARIABLES)


# --------------------------------------------------------------------------------------- the cache

def is_hub_id(reference: str) -> bool:
    """``org/name`` as huggingface_hub validates a repo id (namespace required), not a filesystem path."""
    return (bool(_HUB_ID.fullmatch(reference)) and "--" not in reference and ".." not in reference
            and not reference.endswith(".git"))


def repo_folder(cache_dir: str, repo_id: str) -> str:
    """``models--{org}--{name}`` (``huggingface_hub.file_download.repo_folder_name``)."""
    return os.path.join(cache_dir, "--".join(["models", *repo_id.split("/")]))


def cached_snapshot(cache_dir: str, repo_id: str, revision: str | None = None) -> str | None:
    """The cached snapshot of ``repo_id`` at ``revision`` holding a ``config.json``, else None.

    As huggingface_hub resolves it offline: a commit hash names ``snapshots/<hash>`` directly; a branch or
    tag is read from ``refs/<revision>`` (the file's text, unstripped, is the commit).
    """
    folder = repo_folder(cache_dir, repo_id)
    revision = revision or DEFAULT_REVISION
    commit: str | None = revision if _COMMIT_HASH.fullmatch(revision) else None
    if commit is None:
        try:
            with open(os.path.join(folder, "refs", revision), encoding="utf-8") as ref:
                commit = ref.read()
        except (OSError, UnicodeDecodeError):
            return None
    snapshot = os.path.join(folder, "snapshots", commit)
    return snapshot if commit and os.path.isfile(os.path.join(snapshot, "config.json")) else None


def write_emulated_snapshot(cache_dir: str, repo_id: str, revision: str | None = None) -> str:
    """Write the cache entry an emulated download leaves; returns the snapshot directory (raises OSError).

    ``config.json`` first and the ref last, so an interrupted write leaves nothing that looks cached.
    """
    revision = revision or DEFAULT_REVISION
    commit = revision if _COMMIT_HASH.fullmatch(revision) else EMULATED_COMMIT
    folder = repo_folder(cache_dir, repo_id)
    snapshot = os.path.join(folder, "snapshots", commit)
    os.makedirs(snapshot, exist_ok=True)
    body = {"_emulated": True, "repo_id": repo_id, "revision": revision,
            "note": "written by drafter-operator emulate in place of a download (no weights, not a model config)"}
    with open(os.path.join(snapshot, "config.json"), "w", encoding="utf-8") as out:
        json.dump(body, out, indent=1)
    if commit != revision:
        os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
        with open(os.path.join(folder, "refs", revision), "w", encoding="utf-8") as ref:
            ref.write(commit)
    return snapshot


# ------------------------------------------------------------------------------- the model references

@dataclass(frozen=True)
class ModelReference:
    role: str  # "target" or "drafter"
    model: str
    revision: str | None = None


def model_references(config: EngineConfig) -> list[ModelReference]:
    """The models an engine start resolves, in the engine's order (the target first, then the drafter)."""
    refs = [ModelReference("target", config.model, _str_or_none(config.ignored.get("--revision")))]
    spec = config.speculation
    if spec is not None and spec.draft_model:
        revision = (spec.options.get("revision") if config.engine == "vllm"
                    else config.ignored.get("--speculative-draft-model-revision"))
        refs.append(ModelReference("drafter", spec.draft_model, _str_or_none(revision)))
    return refs


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def offline_error(engine: str, role: str, model: str) -> str:
    """The error the real engine ends with when ``model`` (a hub id) is not cached and offline is on."""
    if engine == "vllm":
        return VLLM_TARGET_OFFLINE_ERROR if role == "target" else VLLM_DRAFTER_OFFLINE_ERROR.format(model=model)
    return SGLANG_OFFLINE_ERROR


class HubModelUnavailable(Exception):
    """A hub id the engine cannot load: offline and not cached. ``status`` is the engine's exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------- resolution

@dataclass(frozen=True)
class ModelSource:
    """Where one model of the start came from, for ``/emulator/state``."""

    role: str
    model: str
    revision: str | None
    #: "local" (a path, not checked), "cache" (found in the hub cache), "downloaded" (emulated download),
    #: "unchecked" (neither a path nor an org/name hub id).
    source: str
    snapshot: str | None = None
    download_seconds: float = 0.0
    #: downloaded only: whether the emulated cache entry was written (the next start finds it).
    persisted: bool | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"role": self.role, "model": self.model, "revision": self.revision, "source": self.source,
                "snapshot": self.snapshot, "downloadSeconds": self.download_seconds, "persisted": self.persisted,
                "note": self.note}


@dataclass(frozen=True)
class HubReport:
    offline: bool
    cache_dir: str
    writes_cache: bool
    models: tuple[ModelSource, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        return {"offline": self.offline, "cacheDir": self.cache_dir, "writesCache": self.writes_cache,
                "models": [m.as_dict() for m in self.models]}


def resolve_models(config: EngineConfig, env: Mapping[str, str], *, download_seconds: float = 0.0,
                   log: Callable[[str], None] = lambda line: None, sleep: Callable[[float], None] = time.sleep,
                   exists: Callable[[str], bool] = os.path.exists,
                   references: Iterable[ModelReference] | None = None) -> HubReport:
    """Resolve the start's model references against the hub cache (the side effects: sleeping, writing).

    Raises :class:`HubModelUnavailable` for the first hub id that is offline and not cached, before any
    download. ``log`` gets one line per hub id (never an environment value but the cache path).
    """
    offline = offline_mode(env)
    cache_dir = hub_cache_dir(env)
    writes = cache_configured(env)
    sources: list[ModelSource] = []
    done: dict[tuple[str, str | None], ModelSource] = {}
    for ref in (model_references(config) if references is None else references):
        if os.path.isabs(ref.model) or exists(ref.model):
            sources.append(ModelSource(ref.role, ref.model, ref.revision, "local"))
            continue
        if not is_hub_id(ref.model):
            sources.append(ModelSource(ref.role, ref.model, ref.revision, "unchecked"))
            continue
        earlier = done.get((ref.model, ref.revision))
        snapshot = cached_snapshot(cache_dir, ref.model, ref.revision)
        if snapshot is not None or (earlier is not None and earlier.source == "downloaded"):
            snapshot = snapshot or (earlier.snapshot if earlier else None)
            log(f"{ref.role} {ref.model}: found in the hub cache ({snapshot or cache_dir})")
            sources.append(ModelSource(ref.role, ref.model, ref.revision, "cache", snapshot))
            done[ref.model, ref.revision] = sources[-1]
            continue
        if offline:
            log(f"{ref.role} {ref.model}: HF_HUB_OFFLINE is on and it is not in the hub cache {cache_dir}: "
                f"the {config.engine} start fails")
            raise HubModelUnavailable(offline_error(config.engine, ref.role, ref.model))
        log(f"{ref.role} {ref.model}: not in the hub cache {cache_dir}: downloading "
            f"(emulated, no network: {download_seconds:g} s)")
        started = time.monotonic()
        sleep(download_seconds)
        persisted, written, note = False, None, None
        if writes:
            try:
                written = write_emulated_snapshot(cache_dir, ref.model, ref.revision)
                persisted = True
            except OSError as exc:
                note = f"cache not writable: {exc.strerror or exc}"
        else:
            note = f"no {'/'.join(CACHE_VARIABLES)} in the environment: the default cache is left alone"
        elapsed = time.monotonic() - started
        log(f"{ref.role} {ref.model}: downloaded (emulated) " +
            (f"into {written}" if persisted else f"but not kept ({note}): the next start downloads again"))
        sources.append(ModelSource(ref.role, ref.model, ref.revision, "downloaded", written, elapsed, persisted, note))
        done[ref.model, ref.revision] = sources[-1]
    return HubReport(offline, cache_dir, writes, tuple(sources))
