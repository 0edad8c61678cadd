"""The one home for the names of the objects the operator derives from a custom resource's name.

A child is named ``<parent>-<suffix>`` whenever that fits its kind's limit: the names every operator
release created so far, so an upgraded operator finds its existing children by name. Only a name that
would not fit changes: the parent is cut and a short hash of the whole intended name goes in before the
suffix (``<parent head>-<hash>-<suffix>``, as Kubernetes and most operators shorten generated names),
so two long parents that differ only past the cut still get different children, and the suffix (the
revision, stage or generation a reader looks for) stays whole. Such names were never created before:
the apiserver refused them.
"""

from __future__ import annotations

import hashlib

from drafter_operator.api.kind import NAME_MAX_LENGTH
from drafter_operator.api.training.sections import STAGE_NODES_MAX

#: A DrafterServing, DrafterBenchmark or DrafterTraining name: our own rule (api/kind.py), so that the
#: children below fit; it binds the names the operator gives its own custom resources too (the gate and
#: Evaluate DrafterBenchmarks).
CUSTOM_RESOURCE_NAME_MAX = NAME_MAX_LENGTH
#: A Service name is a DNS-1035 label (it is the Service's DNS name): 63.
SERVICE_NAME_MAX = 63
#: A Job's name is also the value of the ``job-name`` and ``batch.kubernetes.io/job-name`` labels the Job
#: controller puts on its pods (and our controllers find those pods by it): a label value is at most 63.
JOB_NAME_MAX = 63
#: An Indexed Job's pods get the hostname ``<job>-<index>`` (the Job controller), a DNS label of at most 63
#: that the apiserver refuses beyond: its name leaves room for the largest index.
INDEXED_JOB_NAME_MAX = JOB_NAME_MAX - len(f"-{STAGE_NODES_MAX - 1}")
#: A Deployment name may be a 253-character DNS-1123 subdomain, and so may its ReplicaSet's
#: ``<name>-<pod-template-hash>`` (a hash of up to 10 characters, carried in a label of its own). Its pods
#: are named by generateName, which the apiserver cuts to 58 characters plus 5 random ones, so pod names
#: and the hostnames taken from them stay within 63 whatever the Deployment's name. We keep it a DNS
#: label (63) anyway: the training's generation engine gives its Deployment its Service's name, and the
#: longest serving Deployment name (52 + "-" + a 10-character revision) is exactly 63, so none changes.
DEPLOYMENT_NAME_MAX = 63
#: ConfigMap and PersistentVolumeClaim names are DNS-1123 subdomains; no label carries them.
SUBDOMAIN_NAME_MAX = 253

#: Hex digits of the hash in a shortened name: 32 bits, so two parents that share the kept head collide
#: with a chance of about one in four billion.
HASH_LENGTH = 8


def child_name(parent: str, suffix: str, limit: int) -> str:
    """``<parent>-<suffix>`` when it is at most ``limit`` characters, else the parent's head, a hash of
    the full name and the suffix, exactly ``limit`` characters or fewer.

    The parent is a DNS-1035 label (a custom resource name) and the suffix lowercase letters, digits and
    '-' ending in a letter or digit, so the result is a DNS-1035 label too: the head starts with the
    parent's letter and loses any trailing '-' where it was cut.
    """
    name = f"{parent}-{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_LENGTH]
    room = limit - len(suffix) - len(digest) - 2  # the two '-' around the hash
    if room < 1:
        raise ValueError(f"suffix {suffix!r} leaves no room for a parent in a name of at most {limit} characters")
    return f"{parent[:room].rstrip('-')}-{digest}-{suffix}"
