"""`kubectl drafter known-bad`: the known-bad table the operator checks (data/known-bad.yaml), as a table, YAML or
JSON; with a serving, only the rows that match it or wait for its GPU product. Pure: cli.py reads the serving."""

from __future__ import annotations

import json

import yaml

from drafter_operator import engines
from drafter_operator.api import DrafterServing
from drafter_operator.controllers.serving.known_bad import KnownBad, KnownBadTable, outcomes, serving_facts
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL

COLUMNS = ("ID", "ENGINE", "VERSIONS", "METHODS", "K", "GPU", "PARALLELISM", "ROLE", "PAGE", "SLEEP", "ISSUE")


def serving_marks(serving: dict, gpu_products: frozenset[str] | None) -> dict[str, str]:
    """Row id -> "match" or "pending" (waits for the GPU product) for a DrafterServing body, on its image (the
    engine's default when unset) and ``gpu_products`` (its pods' nodes', when known)."""
    spec = DrafterServing.model_validate(serving).spec
    image = spec.image or engines.DEFAULT_IMAGES[spec.engine]
    matched, pending = outcomes(serving_facts(spec, image, gpu_products=gpu_products))
    return {**{row.id: "pending" for row in pending}, **{row.id: "match" for row in matched}}


def node_products(pods: list[dict], nodes: list[dict]) -> frozenset[str] | None:
    """The GPU products of the nodes the pods run on; None when no pod is placed or a node was not readable."""
    placed = {p["spec"]["nodeName"] for p in pods if (p.get("spec") or {}).get("nodeName")}
    labels = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL, "") for n in nodes}
    if not placed or not placed <= labels.keys():
        return None
    return frozenset(labels[node] for node in placed)


def shown(table: KnownBadTable, marks: dict[str, str] | None) -> list[KnownBad]:
    """Every row, or with a serving's ``marks`` the rows that match it or wait for its GPU."""
    return [row for row in table.rows if marks is None or row.id in marks]


def render_table(table: KnownBadTable, marks: dict[str, str] | None = None) -> str:
    rows = shown(table, marks)
    if marks is not None and not rows:
        return f"no known-bad row matches (table version {table.version})\n"
    header = (*(["SERVING"] if marks is not None else []), *COLUMNS)
    body = [[*([_mark(marks[row.id])] if marks is not None else []), *cells(row)] for row in rows]
    grid = [list(header), *body]
    widths = [max(len(line[i]) for line in grid) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in grid]
    return "\n".join(lines) + f"\n({len(rows)} of {len(table.rows)} rows, table version {table.version})\n"


def _mark(mark: str) -> str:
    return "matches" if mark == "match" else "GPU pending"


def cells(row: KnownBad) -> list[str]:
    """One row's columns: a key the row leaves out shows as "*" (it matches anything)."""
    return [row.id, row.engine, row.engine_versions.strip() or "*", ",".join(row.methods),
            _sizes(row.num_speculative_tokens), "; ".join(row.gpu_products) or "*", _parallelism(row),
            row.role or "*", _sizes(row.page_size), f"level {row.sleep_level}" if row.sleep_level else "*",
            row.issue or f"source {row.source.split()[0].rstrip(',;')}"]  # -o yaml shows the whole source


def _sizes(sizes: tuple | str | None) -> str:
    if sizes is None:
        return "*"
    return sizes if isinstance(sizes, str) else ",".join(str(s) for s in sizes)


def _parallelism(row: KnownBad) -> str:
    if row.parallelism is None:
        return "*"
    names = {"data_parallel": "DP", "expert_parallel": "EP", "pipeline_parallel": "PP"}
    parts = [f"{names[key]}{'>1' if value is True else '=1' if value is False else f'>={value}'}"
             for key, value in row.parallelism.model_dump(exclude_none=True).items()]
    return ",".join(parts) or "*"


def document(table: KnownBadTable, marks: dict[str, str] | None = None) -> dict:
    """The table as its YAML keys (what the data file says), with each row's match against a serving when given."""
    rows = []
    for row in shown(table, marks):
        out = row.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        if marks is not None:
            out["serving"] = marks[row.id]
        rows.append(out)
    return {"version": table.version, "rows": rows}


def render(table: KnownBadTable, output: str, marks: dict[str, str] | None = None) -> str:
    if output == "json":
        return json.dumps(document(table, marks), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(document(table, marks), sort_keys=False, width=120)
    return render_table(table, marks)

