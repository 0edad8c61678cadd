"""The runtime package's rooms by tier (docs/architecture.md): tests/unit/policy/test_layering.py enforces them,
tests/unit/policy/test_architecture_doc.py holds the page to them."""
from __future__ import annotations

ENTRY_MODULES = ("controllers.handlers", "controllers.runner")

TIERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "constants", "settings", "timestamps", "images", "container_paths", "logs", "kube", "permissions",
     "memory_release", "data", "load_picks", "families", "traffic_categories", "figures", "capture", "schedules"),
    ("engines",),
    ("api",),
    ("benchmark_client",),
    ("resources", "training", "monitoring", "preflight"),
    ("acceptance",),
    ("controllers",),
    ("cli", "kubectl_plugin", *ENTRY_MODULES),
)
