"""Whether the hidden-state claim can be shared by pods on several nodes (pure), and what to say when not.

A stage across nodes (spec.resources.nodes above 1: Train's ranks read the hidden states, speculators' Extract
shares write them) mounts the one claim from every pod, so it must be ReadWriteMany. Kubernetes does not say
whether a StorageClass can provide that; a claim it cannot provide just stays Pending, with every stage pod
unschedulable and nothing in status. Two things are known without reading the class: a claim the user named
says its own access modes, and a claim waiting for dynamic provisioning names its provisioner in the
``volume.kubernetes.io/storage-provisioner`` annotation (the PV controller sets it), which for the block-storage
drivers below is one whose volumes a single node mounts read-write (their documentation lists ReadWriteOnce
only for filesystem volumes). Any other provisioner is given the benefit of the doubt.
"""

from __future__ import annotations

PROVISIONER_ANNOTATIONS = ("volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner")

#: Provisioners of block volumes that one node at a time mounts read-write.
SINGLE_NODE_PROVISIONERS = frozenset({
    "ebs.csi.aws.com", "kubernetes.io/aws-ebs",  # Amazon EBS
    "pd.csi.storage.gke.io", "kubernetes.io/gce-pd",  # Google persistent disk
    "disk.csi.azure.com", "kubernetes.io/azure-disk",  # Azure disk
    "cinder.csi.openstack.org", "kubernetes.io/cinder",  # OpenStack Cinder
    "dobs.csi.digitalocean.com", "csi.hetzner.cloud", "linodebs.csi.linode.com",
    "rancher.io/local-path", "openebs.io/local", "topolvm.io", "local.csi.openebs.io",  # node-local volumes
})

SHAREABLE_FIX = ("name a ReadWriteMany class in spec.hiddenStates.storage.storageClassName (a shared filesystem: EFS, "
                 "Filestore, Azure Files, CephFS, NFS, Lustre), give a ReadWriteMany claim of your own in claimName, "
                 "or set resources.nodes: 1")


def sharing_problem(nodes: int, claim: dict | None, owned: bool) -> str | None:
    """Why the hidden-state claim cannot serve pods on ``nodes`` nodes (None: it can, or it is not known yet)."""
    if nodes == 1 or claim is None:
        return None
    name = claim["metadata"]["name"]
    modes = (claim.get("spec") or {}).get("accessModes") or []
    if not owned and "ReadWriteMany" not in modes:
        return (f"spec.hiddenStates.storage.claimName {name!r} is {', '.join(modes) or 'without access modes'}: "
                f"the pods of a stage across {nodes} nodes mount it together, which needs ReadWriteMany")
    if (claim.get("status") or {}).get("phase") == "Bound":
        return None
    annotations = claim["metadata"].get("annotations") or {}
    provisioner = next((annotations[a] for a in PROVISIONER_ANNOTATIONS if a in annotations), None)
    if provisioner in SINGLE_NODE_PROVISIONERS:
        return (f"the hidden-state claim {name!r} asks for ReadWriteMany (a stage spans {nodes} nodes) and its "
                f"storage class provisions through {provisioner}, whose volumes one node at a time mounts read-write")
    return None
