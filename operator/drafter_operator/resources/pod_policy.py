"""Pure helpers that put a spec's pod settings (api/pod.py) into the pods the operator builds.

Shared by the engine Deployment and the benchmark Job, so every kind renders env, resources, labels
and security the same way. The operator's own labels and variables always win: the schema already
refuses the label keys it owns, and a user variable with one of its names is dropped here, because
the operator's value (HF_HUB_OFFLINE, HF_HOME) describes volumes the operator mounts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from drafter_operator import settings
from drafter_operator.images import image_name

#: Where the upstream vLLM and SGLang images run (as root, GPUs through the device plugin): nothing in
#: it stops them, and it closes what they never need. Capabilities are kept: NCCL over InfiniBand needs
#: IPC_LOCK to pin memory. spec.pod.containerSecurityContext replaces it whole.
DEFAULT_ENGINE_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}


def template_metadata(own_labels: Mapping[str, str], policy) -> dict:
    """A pod template's metadata: the policy's labels and annotations, then the operator's labels."""
    extra = policy.pod_metadata() if policy is not None else {}
    metadata: dict = {"labels": {**extra.get("labels", {}), **own_labels}}
    if extra.get("annotations"):
        metadata["annotations"] = dict(extra["annotations"])
    return metadata


def pod_fields(policy) -> dict:
    """Pod spec fields the policy sets: serviceAccountName, imagePullSecrets, priorityClassName,
    runtimeClassName, securityContext."""
    return policy.pod_spec() if policy is not None else {}


def container_security(policy, default: Mapping) -> dict:
    """The container's securityContext: the policy's, else the kind's default."""
    chosen = policy.container_security_context if policy is not None else None
    return chosen.to_json() if chosen is not None else dict(default)


def container_resources(resources, own: Mapping[str, Mapping[str, str]] | None = None,
                        default: Mapping[str, Mapping[str, str]] | None = None) -> dict:
    """requests and limits: the spec's cpu/memory/ephemeral-storage (else ``default``) with the
    operator's own resources (``own``: the GPUs) on top."""
    chosen = resources.to_json() if resources is not None else {}
    chosen = {key: dict(chosen[key]) for key in ("requests", "limits") if chosen.get(key)} or \
        {key: dict(value) for key, value in (default or {}).items()}
    for key, values in (own or {}).items():
        chosen[key] = {**chosen.get(key, {}), **values}
    return chosen


def environment(env: Iterable | None, operator_env: list[dict]) -> list[dict]:
    """The container's env: the spec's variables without the operator's names, then the operator's."""
    owned = {variable["name"] for variable in operator_env}
    return [variable.to_json() for variable in env or () if variable.name not in owned] + list(operator_env)


def environment_from(env_from: Iterable | None) -> list[dict]:
    return [source.to_json() for source in env_from or ()]


# ---------------------------------------------------------------------------------------------------
# What an administrator allows tenants to put in the pods the operator creates (docs/security.md).

#: The chart renders these from tenancy.allowedImagePrefixes and tenancy.allowedServiceAccounts (JSON).
ALLOWED_IMAGE_PREFIXES_ENV = settings.ALLOWED_IMAGE_PREFIXES.name
ALLOWED_SERVICE_ACCOUNTS_ENV = settings.ALLOWED_SERVICE_ACCOUNTS.name
#: The key of allowedServiceAccounts that applies in every namespace.
EVERY_NAMESPACE = "*"


def admits(prefix: str, image: str) -> bool:
    """Whether an entry of tenancy.allowedImagePrefixes admits `image`. Only at a reference boundary: a raw
    string prefix would let `registry.internal` admit `registry.internal.evil.com/x` and `vllm/vllm-openai`
    admit `vllm/vllm-openai-evil`. The entry is the exact image; or a registry host or repository path that the
    image's name is, or continues with `/` (an entry ending with `/` says so itself); or a repository name
    followed by `:` or `@` (any tag, any digest of it)."""
    name = image_name(image)
    if image == prefix:
        return True
    if prefix.endswith((":", "@")):
        return image.startswith(prefix) and name == prefix[:-1]
    if prefix.endswith("/"):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + "/")


@dataclass(frozen=True)
class TenantPolicy:
    """Images and ServiceAccounts the operator may put in a tenant's pods. Empty: anything (the
    behaviour before these settings existed), so an upgrade changes nothing until an administrator
    opts in. The operator checks before it creates anything, so a refused spec leaves no child behind."""

    #: An image is allowed when one of these admits it (`admits`: "registry.internal", "vllm/vllm-openai:", ...).
    image_prefixes: tuple[str, ...] = ()
    #: Namespace (or "*") -> ServiceAccount names allowed there; the default ServiceAccount (no
    #: serviceAccountName) is always allowed. Empty mapping: any name.
    service_accounts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allowed_service_accounts(self, namespace: str) -> tuple[str, ...]:
        return tuple(sorted({*self.service_accounts.get(EVERY_NAMESPACE, ()), *self.service_accounts.get(namespace, ())}))

    def problems(self, namespace: str, images: Iterable[tuple[str, str | None]], service_account: tuple[str, str | None]
                 ) -> list[str]:
        """Why these pods may not be created: ``images`` are (field path, image the pod would run), where
        the field path names what sets it; ``service_account`` is (field path, name or None)."""
        problems = []
        if self.image_prefixes:
            allowed = ", ".join(repr(p) for p in self.image_prefixes)
            for where, image in images:
                if image is not None and not any(admits(prefix, image) for prefix in self.image_prefixes):
                    problems.append(f"{where} {image!r} is not an image the operator may run: use one under "
                                    f"{allowed} (the administrator's tenancy.allowedImagePrefixes: a registry, a "
                                    f"repository path or an exact image)")
        where, name = service_account
        if self.service_accounts and name is not None and name not in self.allowed_service_accounts(namespace):
            names = ", ".join(self.allowed_service_accounts(namespace)) or "none besides the default"
            problems.append(f"{where} {name!r} is not a ServiceAccount the operator may run pods as in namespace "
                            f"{namespace}: use one of {names}, or remove it for the namespace's default "
                            f"(the administrator's tenancy.allowedServiceAccounts)")
        return problems

    @classmethod
    def parse(cls, image_prefixes: str | None, service_accounts: str | None) -> TenantPolicy:
        """From the environment's JSON values; ValueError naming the variable when one is malformed."""
        prefixes = _json_setting(ALLOWED_IMAGE_PREFIXES_ENV, image_prefixes, [])
        accounts = _json_setting(ALLOWED_SERVICE_ACCOUNTS_ENV, service_accounts, {})
        if not isinstance(prefixes, list) or not all(isinstance(p, str) and p for p in prefixes):
            raise ValueError(f"{ALLOWED_IMAGE_PREFIXES_ENV} must be a JSON list of non-empty strings, e.g. "
                             f'["registry.internal/"]')
        if not isinstance(accounts, dict) or not all(
                isinstance(k, str) and isinstance(v, list) and all(isinstance(n, str) and n for n in v)
                for k, v in accounts.items()):
            raise ValueError(f"{ALLOWED_SERVICE_ACCOUNTS_ENV} must be a JSON object of namespace (or \"*\") to a list "
                             f'of ServiceAccount names, e.g. {{"*": ["inference"]}}')
        return cls(tuple(prefixes), {k: tuple(v) for k, v in accounts.items()})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TenantPolicy:
        return _parsed(settings.ALLOWED_IMAGE_PREFIXES.read(environ), settings.ALLOWED_SERVICE_ACCOUNTS.read(environ))


@functools.lru_cache(maxsize=8)
def _parsed(image_prefixes: str | None, service_accounts: str | None) -> TenantPolicy:
    # Every reconcile builds its state from the environment: the parse is remembered per value.
    return TenantPolicy.parse(image_prefixes, service_accounts)


def _json_setting(name: str, raw: str | None, empty):
    if raw is None or not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{name} is not JSON: {raw[:80]!r}") from None
