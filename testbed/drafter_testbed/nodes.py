"""Pure builders for the local cluster's Node objects.

Two kinds of node share the cluster: kwok nodes (scheduling and scale only: kwok pretends their pods
run) and process nodes, whose pods the local process runner really starts on this host. The runtime is
a label, so kwok and the runner each manage exactly their own nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNTIME_LABEL = "drafter.dev/node-runtime"
CLUSTER_ANNOTATION = "drafter.dev/local-cluster-id"
KWOK = "kwok"
PROCESS = "process"
GPU_RESOURCE = "nvidia.com/gpu"

# Memory per GPU in MiB as NVIDIA's GPU feature discovery reports it, and the compute capability.
GPU_PRODUCTS: dict[str, dict[str, str]] = {
    "NVIDIA-B200": {"memory": "183359", "family": "blackwell", "compute.major": "10", "compute.minor": "0"},
    "NVIDIA-GB200": {"memory": "189471", "family": "blackwell", "compute.major": "10", "compute.minor": "0"},
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": {
        "memory": "97887", "family": "blackwell", "compute.major": "12", "compute.minor": "0"},
    "NVIDIA-H200": {"memory": "143771", "family": "hopper", "compute.major": "9", "compute.minor": "0"},
    "NVIDIA-H100-80GB-HBM3": {"memory": "81559", "family": "hopper", "compute.major": "9", "compute.minor": "0"},
}
DEFAULT_GPU_PRODUCT = "NVIDIA-B200"

# GKE-style taint: GPU nodes only take pods that tolerate it, so CPU work never squats on GPUs.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    runtime: str  # KWOK or PROCESS
    pod_cidr: str  # always inside 127.0.0.0/8: a pod IP must never point at a real network
    gpus: int = 0
    gpu_product: str = DEFAULT_GPU_PRODUCT
    cpu: str = "32"
    memory: str = "128Gi"
    max_pods: int = 110
    #: Taints beside the GPU's: a test's own nodes that only its pods tolerate.
    taints: tuple[tuple[str, str], ...] = ()


def gpu_labels(product: str, count: int) -> dict[str, str]:
    """The labels NVIDIA GPU feature discovery puts on a node with `count` GPUs of `product`."""
    if product not in GPU_PRODUCTS:
        raise ValueError(f"unknown GPU product {product!r}; choose one of {sorted(GPU_PRODUCTS)}")
    facts = GPU_PRODUCTS[product]
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": facts["memory"],
        "nvidia.com/gpu.family": facts["family"],
        "nvidia.com/gpu.compute.major": facts["compute.major"],
        "nvidia.com/gpu.compute.minor": facts["compute.minor"],
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/mig.capable": "false",
    }


def node_manifest(spec: NodeSpec, cluster_id: str) -> dict:
    if spec.runtime not in (KWOK, PROCESS):
        raise ValueError(f"node runtime must be {KWOK!r} or {PROCESS!r}, not {spec.runtime!r}")
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"local-{spec.runtime}-{spec.gpus}gpu" if spec.gpus else f"local-{spec.runtime}-cpu",
        RUNTIME_LABEL: spec.runtime,
    }
    annotations = {CLUSTER_ANNOTATION: cluster_id, "node.alpha.kubernetes.io/ttl": "0"}
    if spec.runtime == KWOK:
        annotations["kwok.x-k8s.io/node"] = "fake"
    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.max_pods), "ephemeral-storage": "1Ti"}
    taints = []
    if spec.gpus:
        labels.update(gpu_labels(spec.gpu_product, spec.gpus))
        resources[GPU_RESOURCE] = str(spec.gpus)
        taints.append(dict(GPU_TAINT))
    taints += [{"key": key, "value": value, "effect": "NoSchedule"} for key, value in spec.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": spec.pod_cidr, "podCIDRs": [spec.pod_cidr], "taints": taints},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": spec.name}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "local",
                         "containerRuntimeVersion": f"drafter-{spec.runtime}://local"},
        },
    }


# kwok nodes beyond the first 255 (a scale run's 500 servings each take a whole 8-GPU node) get /25s in the
# cluster's fourth /16: a kwok node holds a few pods, never the 110 a /24 is sized for.
KWOK_NODES_IN_FIRST_BLOCK = 255
MAX_KWOK_NODES = KWOK_NODES_IN_FIRST_BLOCK + 2 * 255


@dataclass(frozen=True)
class LoopbackNetwork:
    """The loopback addresses of one local cluster: 127.<base>.x.x for its process pods,
    127.<base+1>.x.x for kwok pods (and 127.<base+3>.x.x for kwok nodes past the 255th), 127.<base+2>.0.0/16
    for Services. Two local clusters on one machine (a developer's and CI's) get different bases, so their
    pods and Service listeners never collide."""

    base: int

    def max_nodes(self, runtime: str) -> int:
        return MAX_KWOK_NODES if runtime == KWOK else 255

    def pod_cidr(self, runtime: str, index: int) -> str:
        if not 0 <= index < self.max_nodes(runtime):
            raise ValueError(f"{runtime} node index {index} out of range 0..{self.max_nodes(runtime) - 1}")
        if runtime == PROCESS:
            return f"127.{self.base}.{index}.0/24"
        if index < KWOK_NODES_IN_FIRST_BLOCK:
            return f"127.{self.base + 1}.{index}.0/24"
        extra = index - KWOK_NODES_IN_FIRST_BLOCK
        return f"127.{self.base + 3}.{extra // 2}.{128 * (extra % 2)}/25"

    def pod_cidr_index(self, runtime: str, cidr: str) -> int | None:
        """The node index `pod_cidr` gave `cidr`, or None when it is not one of this runtime's CIDRs."""
        try:
            octets = [int(o) for o in cidr.split("/")[0].split(".")]
        except ValueError:
            return None
        if len(octets) != 4 or octets[0] != 127:
            return None
        if runtime == PROCESS:
            index = octets[2] if octets[1] == self.base else None
        elif octets[1] == self.base + 1:
            index = octets[2]
        elif octets[1] == self.base + 3:
            index = KWOK_NODES_IN_FIRST_BLOCK + 2 * octets[2] + octets[3] // 128
        else:
            index = None
        if index is None or not 0 <= index < self.max_nodes(runtime) or self.pod_cidr(runtime, index) != cidr:
            return None
        return index

    @property
    def service_cidr(self) -> str:
        return f"127.{self.base + 2}.0.0/16"

    @property
    def cluster_dns(self) -> str:
        """The cluster DNS address (CoreDNS), the tenth of the Service range as kubeadm reserves it: the
        `kube-dns` Service holds it, so the apiserver never hands it to another Service."""
        return f"127.{self.base + 2}.0.10"

    @property
    def kwok_fallback_cidr(self) -> str:
        return f"127.{self.base + 1}.255.0/24"

    def owns_pod_cidr(self, runtime: str, cidr: str) -> bool:
        return self.pod_cidr_index(runtime, cidr) is not None


def network_for(port_base: int) -> LoopbackNetwork:
    """Derived from the cluster's port range: clusters with disjoint ports get disjoint addresses."""
    return LoopbackNetwork(base=16 + 4 * ((port_base // 8) % 59))


def default_topology(network: LoopbackNetwork, gpu_nodes: int, gpu_runtime: str, gpus_per_node: int,
                     gpu_product: str, cpu_nodes: int = 1) -> list[NodeSpec]:
    nodes = [NodeSpec(name=f"local-cpu-{i}", runtime=PROCESS, pod_cidr=network.pod_cidr(PROCESS, i))
             for i in range(cpu_nodes)]
    offset = cpu_nodes if gpu_runtime == PROCESS else 0
    nodes += [
        NodeSpec(name=f"gpu-{gpu_runtime}-{i}", runtime=gpu_runtime, pod_cidr=network.pod_cidr(gpu_runtime, offset + i),
                 gpus=gpus_per_node, gpu_product=gpu_product, cpu="224", memory="2Ti")
        for i in range(gpu_nodes)
    ]
    return nodes
