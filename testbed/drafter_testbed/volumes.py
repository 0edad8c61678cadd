"""Pre-bound volumes for the local cluster, which runs no storage provisioner."""

from __future__ import annotations


def static_claim(namespace: str, claim: str, host_path: str, size: str = "1Ti") -> list[dict]:
    """A PersistentVolume bound to a claim of that name in `namespace` (model weights on a real cluster).

    The process runner maps a claim to one host directory per (namespace, claim), so `host_path` only
    matters to other node runtimes.
    """
    pv_name = f"{namespace}-{claim}"
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
         "spec": {"capacity": {"storage": size}, "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                  "storageClassName": "", "hostPath": {"path": host_path},
                  "claimRef": {"namespace": namespace, "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
         "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv_name,
                  "resources": {"requests": {"storage": size}}}},
    ]


def volume_for_claim(namespace: str, claim: str, host_path: str, size: str = "2Gi") -> dict:
    """A PersistentVolume bound in advance to a claim someone else will create under that name (the
    operator's hidden-state claim): with no provisioner, nothing else would ever bind it."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{claim}"},
            "spec": {"capacity": {"storage": size}, "storageClassName": "",
                     # A host directory every process node of this machine shares: any number of writers.
                     "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                     "hostPath": {"path": host_path}, "claimRef": {"namespace": namespace, "name": claim}}}
