"""The known-bad table (data/known-bad.yaml, controllers/serving/known_bad.py): the packaged file fits its schema, the
schema refuses what would silently never match, each key matches and refuses what it should, and a row keyed by
GPU product waits for the product, then refuses the revision once its pods are placed on that GPU (never one that
already serves).

Adding a row: the row in data/known-bad.yaml (raise `version`) and its case in ROW_CASES below.
"""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace as NS

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator import constants
from drafter_operator.controllers.serving import known_bad as kb
from drafter_operator.controllers.serving.known_bad import KnownBad, KnownBadTableError, load_table, outcomes, packaged_table, \
    row_outcome, serving_facts
from drafter_operator.controllers.serving.compatibility import REFUSED_ON_GPU
from drafter_operator.kubectl_plugin import known_bad as plugin
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL
from tests.support.servings import SEED, World
from tests.support.spec_doubles import UNSET_LAYOUT

IMAGE = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}
B300, H100 = "NVIDIA-B300-SXM6-AC", "NVIDIA-H100-80GB-HBM3"


def spec(engine: str = "vllm", method: str = "eagle3", k: int | None = None, steps: int | None = None,
         model: str = "/models/target", extra: tuple[str, ...] = (), max_len: int | None = None,
         gpu: str | None = None, env: dict[str, str] | None = None, tp: int = 8, **layout) -> NS:
    """The attributes of a DrafterServingSpec the table reads (its cross-field rules are tested elsewhere);
    ``layout``: spec.target's pipeline_parallel_size, data_parallel_size or expert_parallel, unset by default."""
    return NS(engine=engine, drafter=NS(method=method, num_speculative_tokens=k, num_steps=steps, suffix=None),
              target=NS(model=model, extra_args=list(extra), tensor_parallel_size=tp, max_model_len=max_len,
                        **{**UNSET_LAYOUT, **layout}),
              resources=NS(nodes_per_replica=None),
              placement=NS(gpu_product=gpu, node_selector=None) if gpu else None,
              env=[NS(name=n, value=v) for n, v in (env or {}).items()])


def row(**keys) -> KnownBad:
    base = {"id": "a-row", "engine": "vllm", "methods": ["eagle3"], "reason": "r", "fix": "f",
            "issue": "https://github.com/vllm-project/vllm/issues/1"}
    return KnownBad.model_validate({**base, **keys})


def outcome(r: KnownBad, s, gpu_products: frozenset[str] | None = None, image: str | None = None):
    return row_outcome(r, serving_facts(s, image or IMAGE[s.engine], gpu_products=gpu_products))

# ---------------------------------------------------------------------------------------------------
# The packaged file


def test_the_packaged_table_loads_through_its_schema_with_at_least_twelve_cited_rows():
    table = packaged_table()
    assert isinstance(table.version, int) and table.version >= 2
    assert len(table.rows) >= 12
    assert len({r.id for r in table.rows}) == len(table.rows)
    for r in table.rows:
        assert r.issue or r.source, r.id
        assert r.fix and r.reason, r.id
        assert set(r.methods) <= set(constants.DRAFTER_METHODS) and r.engine in constants.ENGINES, r.id
    upstream = [r for r in table.rows if r.issue]
    assert len(upstream) >= 12
    assert all(re.fullmatch(r"https://github\.com/(vllm-project|sgl-project)/[\w-]+/(issues|pull)/\d+", r.issue)
               for r in upstream)
    # The contract-tier rows stay, citing the pinned engine's source.
    assert {"vllm-eagle3-deepseek-mla", "vllm-dspark-specforge-nested-markov-rank",
            "vllm-dflash-speculators-served-causal", "vllm-mtp-kimi"} <= {r.id for r in table.rows if r.source}


def test_every_new_key_is_used_by_some_row():
    rows = packaged_table().rows
    for key in ("num_speculative_tokens", "gpu_products", "parallelism", "role", "page_size", "sleep_level",
                "max_model_len", "model_runner", "engine_versions"):
        assert any(getattr(r, key) for r in rows), key


#: Each row, and a spec it matches (with the GPU product its pods run on). Adding a row adds its case here.
ROW_CASES = {
    "vllm-eagle3-deepseek-mla": (spec(model="/models/Kimi-K2.5", k=5), None),
    "vllm-dspark-specforge-nested-markov-rank": (spec(method="dspark", k=7), None),
    "vllm-dflash-speculators-served-causal": (spec(method="dflash", k=7), None),
    "vllm-mtp-kimi": (spec(method="mtp", model="/models/Kimi-K2-Instruct"), None),
    "sglang-dspark-depth5-sm120-b300": (spec("sglang", "dspark"), B300),
    "sglang-dspark-deepseek-v4-sm120": (spec("sglang", "dspark", k=7, model="/models/DeepSeek-V4-Flash"),
                                        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"),
    "sglang-block-drafter-page-size-1": (spec("sglang", "dflash", k=7, extra=("--page-size", "1")), None),
    "vllm-v1-runner-padded-drafter-prompt-logprobs": (spec(k=3, env={"VLLM_USE_V2_MODEL_RUNNER": "0"}), None),
    "vllm-sleep-level2-drafter-lost": (spec(k=3, extra=("--enable-sleep-mode",)), None),
    "vllm-dp-ep-drafter-hang-near-max-len": (spec(method="mtp", extra=("-dp", "2", "-ep")), None),
    "vllm-dp-ep-dspark-profile-run": (spec(method="dspark", k=5,
                                           extra=("--data-parallel-size=2", "--enable-expert-parallel")), None),
    "vllm-mtp-pipeline-parallel": (spec(method="mtp", extra=("--pipeline-parallel-size", "2")), None),
    "sglang-pd-decode-dp-attention-mtp-hang": (spec("sglang", "mtp", steps=3, model="/models/GLM-5.2-FP8",
                                                    extra=("--disaggregation-mode", "decode", "--attn-dp-size", "8")),
                                               None),
    "vllm-dflash-beyond-trained-length": (spec(method="dflash", k=7, max_len=32768), None),
    "vllm-mtp-long-context-net-loss": (spec(method="mtp", k=6, max_len=131072), None),
    "vllm-deepseek-v4-mtp-sm120-hang": (spec(method="mtp", model="/models/DeepSeek-V4-Flash"),
                                        "NVIDIA-GeForce-RTX-5090"),
}


def test_every_row_has_a_case():
    assert set(ROW_CASES) == {r.id for r in packaged_table().rows}, "add the new row's case to ROW_CASES"


@pytest.mark.parametrize("row_id", sorted(ROW_CASES))
def test_each_row_matches_its_case_and_a_gpu_row_waits_for_the_product(row_id):
    s, gpu = ROW_CASES[row_id]
    image = "vllm/vllm-openai:v0.32.0" if row_id == "vllm-dp-ep-drafter-hang-near-max-len" else None
    r = next(r for r in packaged_table().rows if r.id == row_id)
    products = frozenset({gpu}) if gpu else None
    assert outcome(r, s, products, image) == "match"
    if gpu:
        assert outcome(r, s, None, image) == "pending"
        assert outcome(r, s, frozenset({H100}), image) is None

# ---------------------------------------------------------------------------------------------------
# The schema


def table_text(rows: str, version: str = "1") -> str:
    return f"version: {version}\nrows:\n{rows}"


GOOD = """  - id: good-row
    engine: vllm
    methods: [eagle3]
    reason: r
    fix: f
    issue: https://github.com/vllm-project/vllm/issues/1
"""


@pytest.mark.parametrize("key,value,says", [
    ("gpuProdcts", '["B300"]', "field gpuProdcts: unknown key"),
    ("gpuProducts", '["(B300"]', "field gpuProducts: bad regex '(B300'"),
    ("modelPatterns", '["[kimi"]', "field modelPatterns: bad regex"),
    ("engineVersions", '">=0.3x"', "field engineVersions: bad bound '>=0.3x'"),
    ("numSpeculativeTokens", '"=>5"', "field numSpeculativeTokens: bad bound '=>5'"),
    ("numSpeculativeTokens", "[0]", "field numSpeculativeTokens"),
    ("pageSize", '[one]', "field pageSize"),
    ("maxModelLen", '"long"', "field maxModelLen: bad bound 'long'"),
    ("parallelism", "{dataParalel: true}", "field parallelism.dataParalel: unknown key"),
    ("parallelism", "{dataParallel: 1}", "field parallelism.dataParallel"),
    ("role", "both", "field role"),
    ("sleepLevel", "3", "field sleepLevel"),
    ("modelRunner", "v3", "field modelRunner"),
    ("issue", "https://example.com/bug", "field issue"),
    ("methods", "[eagle4]", "field methods"),
])
def test_the_schema_names_the_row_and_the_field_of_a_bad_key(key, value, says):
    text = table_text(GOOD + "  - id: bad-row\n    engine: vllm\n    methods: [eagle3]\n    reason: r\n    fix: f\n"
                             f"    issue: https://github.com/vllm-project/vllm/issues/2\n    {key}: {value}\n")
    with pytest.raises(KnownBadTableError) as error:
        load_table(text)
    message = str(error.value)
    assert "row 'bad-row' (rows[1])" in message and says in message, message
    assert "good-row" not in message


def test_the_schema_refuses_a_row_without_evidence_a_duplicate_id_and_a_bad_version():
    uncited = "  - id: no-cite\n    engine: vllm\n    methods: [eagle3]\n    reason: r\n    fix: f\n"
    with pytest.raises(KnownBadTableError, match=r"row 'no-cite'.*set issue .* or source"):
        load_table(table_text(GOOD + uncited))
    with pytest.raises(KnownBadTableError, match="row id 'good-row' is used twice"):
        load_table(table_text(GOOD + GOOD))
    with pytest.raises(KnownBadTableError, match="field version"):
        load_table(table_text(GOOD, version='"2"'))
    with pytest.raises(KnownBadTableError, match="modelRunner is a vLLM setting"):
        load_table(table_text(GOOD.replace("engine: vllm", "engine: sglang") + "    modelRunner: v1\n"))
    with pytest.raises(KnownBadTableError, match="field extra: unknown key"):
        load_table(table_text(GOOD) + "extra: 1\n")

# ---------------------------------------------------------------------------------------------------
# Each key, over the values a spec can take

ks = st.one_of(st.none(), st.integers(1, 16))


@given(k=ks, wanted=st.one_of(st.lists(st.one_of(st.integers(1, 16), st.just("default")), min_size=1, max_size=4),
                              st.tuples(st.sampled_from([">=", "<=", ">", "<", "=="]), st.integers(1, 16))))
def test_k_matches_its_list_or_bounds_and_an_unset_k_only_default(k, wanted):
    selector = wanted if isinstance(wanted, list) else f"{wanted[0]}{wanted[1]}"
    r = row(engine="sglang", methods=["dspark"], numSpeculativeTokens=selector)
    hit = outcome(r, spec("sglang", "dspark", k=k)) == "match"
    if isinstance(wanted, list):
        assert hit == ((k if k is not None else "default") in wanted)
    else:
        op, bound = wanted
        expected = k is not None and {">=": k >= bound, "<=": k <= bound, ">": k > bound, "<": k < bound,
                                      "==": k == bound}[op]
        assert hit == expected


@given(steps=ks)
def test_k_on_sglang_is_what_it_renders_num_steps_for_a_chain_drafter(steps):
    r = row(engine="sglang", methods=["eagle3"], numSpeculativeTokens=[3])
    assert (outcome(r, spec("sglang", "eagle3", steps=steps, k=5)) == "match") == (steps == 3)


@given(page=st.one_of(st.none(), st.sampled_from([1, 16, 32, 64, 128, 256])), engine=st.sampled_from(constants.ENGINES),
       wanted=st.sampled_from([[1], [1, "default"], ">=64"]))
def test_page_size_is_read_from_the_engines_own_flag(page, engine, wanted):
    flag = "--block-size" if engine == "vllm" else "--page-size"
    extra = (flag, str(page)) if page is not None else ()
    r = row(engine=engine, methods=["dflash"], pageSize=wanted)
    hit = outcome(r, spec(engine, "dflash", k=7, extra=extra)) == "match"
    if isinstance(wanted, str):
        assert hit == (page is not None and page >= 64)
    else:
        assert hit == ((page if page is not None else "default") in wanted)


parallel_flags = st.fixed_dictionaries({
    "dp": st.sampled_from([None, 1, 2, 4]), "ep": st.booleans(), "pp": st.sampled_from([None, 1, 2]),
    "spelling": st.sampled_from(["long", "short", "equals"])})


def vllm_parallel_args(flags: dict) -> tuple[str, ...]:
    long_, short = {"dp": ("--data-parallel-size", "-dp"), "pp": ("--pipeline-parallel-size", "-pp")}, \
        {"ep": ("--enable-expert-parallel", "-ep")}
    args: list[str] = []
    for key in ("dp", "pp"):
        if flags[key] is not None:
            name = long_[key][1] if flags["spelling"] == "short" else long_[key][0]
            args += [f"{name}={flags[key]}"] if flags["spelling"] == "equals" else [name, str(flags[key])]
    if flags["ep"]:
        args.append(short["ep"][1] if flags["spelling"] == "short" else short["ep"][0])
    return tuple(args)


@given(flags=parallel_flags, wanted=st.fixed_dictionaries({}, optional={
    "dataParallel": st.sampled_from([True, False, 2, 4]), "expertParallel": st.sampled_from([True, False]),
    "pipelineParallel": st.sampled_from([True, False, 2])}))
def test_parallelism_is_read_with_vllms_parser_every_spelling(flags, wanted):
    r = row(methods=["mtp"], parallelism=wanted)
    facts = serving_facts(spec(method="mtp", extra=vllm_parallel_args(flags), tp=4), IMAGE["vllm"])
    dp, pp = flags["dp"] or 1, flags["pp"] or 1
    assert (facts.launch.data_parallel, facts.launch.pipeline_parallel) == (dp, pp)
    assert facts.launch.expert_parallel == (4 * dp if flags["ep"] else 1)

    def holds(want, size):
        return want is None or ((size > 1) == want if isinstance(want, bool) else size >= want)

    expected = all(holds(wanted.get(key), size) for key, size in (
        ("dataParallel", dp), ("expertParallel", facts.launch.expert_parallel), ("pipelineParallel", pp)))
    assert (row_outcome(r, facts) == "match") == expected


@given(attn_dp=st.sampled_from([None, 1, 2, 8]), ep=st.sampled_from([None, 1, 4]),
       backend=st.sampled_from([None, "none", "deepep", "mooncake"]))
def test_sglang_data_and_expert_parallelism(attn_dp, ep, backend):
    extra = [*(["--attn-dp-size", str(attn_dp)] if attn_dp else []), *(["--ep-size", str(ep)] if ep else []),
             *(["--moe-a2a-backend", backend] if backend else [])]
    launch = serving_facts(spec("sglang", "mtp", extra=tuple(extra), tp=8), IMAGE["sglang"]).launch
    assert launch.data_parallel == (attn_dp or 1)
    # An all-to-all backend such as DeepEP makes expert parallelism span the TP group (SGLang's _a2a_ep_size).
    assert launch.expert_parallel == (8 if backend in ("deepep", "mooncake") else ep or 1)


@given(role=st.sampled_from([None, "kv_producer", "kv_consumer", "kv_both"]), dotted=st.booleans(),
       wanted=st.sampled_from(["prefill", "decode"]))
def test_the_role_comes_from_vllms_kv_transfer_config(role, dotted, wanted):
    if role is None:
        extra: tuple[str, ...] = ()
    elif dotted:
        extra = ("--kv-transfer-config.kv_connector", "NixlConnector", "--kv-transfer-config.kv_role", role)
    else:
        extra = ("--kv-transfer-config", f'{{"kv_connector": "NixlConnector", "kv_role": "{role}"}}')
    r = row(role=wanted)
    roles = {"kv_producer": {"prefill"}, "kv_consumer": {"decode"}, "kv_both": {"prefill", "decode"}}.get(role, set())
    assert (outcome(r, spec(k=3, extra=extra)) == "match") == (wanted in roles)


@given(mode=st.sampled_from([None, "null", "prefill", "decode"]), wanted=st.sampled_from(["prefill", "decode"]))
def test_the_role_comes_from_sglangs_disaggregation_mode(mode, wanted):
    extra = ("--disaggregation-mode", mode) if mode else ()
    r = row(engine="sglang", methods=["eagle3"], role=wanted)
    assert (outcome(r, spec("sglang", steps=3, extra=extra)) == "match") == (mode == wanted)


@given(flag=st.sampled_from([None, "--enable-sleep-mode", "--no-enable-sleep-mode", "--disable-sleep-mode"]))
def test_a_sleep_level_row_matches_a_serving_that_enables_sleep_mode(flag):
    r = row(sleepLevel=2)
    extra = (flag,) if flag else ()
    assert (outcome(r, spec(k=3, extra=extra)) == "match") == (flag == "--enable-sleep-mode")


@given(length=st.one_of(st.none(), st.integers(128, 1 << 20)))
def test_max_model_len_bounds_and_an_unset_length_meets_none(length):
    r = row(maxModelLen=">8192")
    assert (outcome(r, spec(k=3, max_len=length)) == "match") == (length is not None and length > 8192)


@given(value=st.sampled_from([None, "0", "1", "true"]), wanted=st.sampled_from(["v1", "v2"]))
def test_the_model_runner_comes_from_spec_env(value, wanted):
    r = row(modelRunner=wanted)
    s = spec(k=3, env={"VLLM_USE_V2_MODEL_RUNNER": value} if value is not None else None)
    assert (outcome(r, s) == "match") == (wanted == ("v1" if value == "0" else "v2"))


@given(version=st.sampled_from(["v0.30.1", "v0.33.0", "v0.34.2", "latest"]))
def test_engine_versions_bound_the_image_tag_and_an_unknown_tag_may_be_any(version):
    r = row(engineVersions=">=0.31,<0.34")
    hit = outcome(r, spec(k=3), image=f"vllm/vllm-openai:{version}") == "match"
    assert hit == (version in ("v0.33.0", "latest"))


@given(products=st.one_of(st.none(), st.frozensets(st.sampled_from([B300, H100, "NVIDIA-GeForce-RTX-5090", ""]),
                                                    min_size=1)),
       pinned=st.one_of(st.none(), st.sampled_from([B300, H100])))
def test_a_gpu_row_waits_for_the_product_and_the_spec_pin_counts_first(products, pinned):
    r = row(gpuProducts=["(?i)B300", "(?i)RTX-50[0-9]0"])
    got = outcome(r, spec(k=3, gpu=pinned), products)
    known = frozenset({pinned}) if pinned else products
    if known is None:
        assert got == "pending"
    else:
        assert (got == "match") == any(re.search("(?i)B300|RTX-50[0-9]0", p) for p in known)
        assert got != "pending"


@settings(max_examples=200)
@given(method=st.sampled_from(constants.DRAFTER_METHODS), k=ks, engine=st.sampled_from(constants.ENGINES),
       products=st.one_of(st.none(), st.frozensets(st.sampled_from([B300, H100]), min_size=1)),
       sleep=st.booleans())
def test_a_row_never_matches_another_engine_or_method(method, k, engine, products, sleep):
    extra = ("--enable-sleep-mode",) if sleep and engine == "vllm" else ()
    for r in packaged_table().rows:
        if r.engine == engine and method in r.methods:
            continue
        assert outcome(r, spec(engine, method, k=k, steps=k, extra=extra), products) is None, r.id

# ---------------------------------------------------------------------------------------------------
# The serving: pending at admission, refused once placed on the GPU, never torn down once it serves


class PlacedWorld(World):
    """The decision's world, with every pod placed on one node whose GPU product the reconciler read (None: not
    read yet)."""

    def __init__(self, body: dict, product: str | None = None):
        super().__init__(body)
        self.product = product

    def state(self):
        state = super().state()
        observed = state.observed
        observed.nodes = {revision: ("gpu-node",) for revision in observed.deployments}
        observed.node_products = {"gpu-node": self.product} if self.product is not None else {}
        return state


def dspark_body(k: int, allow: bool, pinned: str | None = None) -> dict:
    body = copy.deepcopy(SEED)
    body["metadata"] = {"name": "kimi", "namespace": "team", "uid": "u-1", "generation": 1}
    body["spec"].update(engine="sglang", image=IMAGE["sglang"],
                        drafter={"method": "dspark", "numSpeculativeTokens": k, "allowKnownBad": allow})
    for parser in ("toolCallParser", "reasoningParser"):
        body["spec"]["target"].pop(parser)
    body["spec"]["placement"].pop("gpuProduct")
    if pinned:
        body["spec"]["placement"]["gpuProduct"] = pinned
    return body


def condition(world: World, kind: str) -> dict:
    return next(c for c in world.body["status"]["conditions"] if c["type"] == kind)


def test_a_gpu_row_is_pending_at_admission_and_asks_for_the_nodes_once_pods_are_placed():
    world = PlacedWorld(dspark_body(5, allow=False))
    plan = world.decide()
    assert plan.writes and plan.read_nodes == ()  # nothing placed yet: the revision is created
    world.apply(plan)
    compatible = condition(world, "DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("True", "GPUCheckPending")
    assert "sglang-dspark-depth5-sm120-b300" in compatible["message"]
    assert "https://github.com/sgl-project/sglang/issues/33800" in compatible["message"]
    assert world.decide().read_nodes == ("gpu-node",)


def test_a_placement_pin_is_known_at_admission_and_refuses_before_anything_is_created():
    world = PlacedWorld(dspark_body(5, allow=False, pinned=B300))
    plan = world.decide()
    assert plan.writes == [] and plan.read_nodes == ()
    world.apply(plan)
    compatible = condition(world, "DrafterCompatible")
    assert compatible["reason"] == "KnownBadCombination" and "Fix: Set spec.drafter.numSpeculativeTokens" in \
        compatible["message"]


def test_placed_on_the_gpu_a_first_revision_fails_and_stays_failed_once_its_pods_are_gone():
    world = PlacedWorld(dspark_body(5, allow=False), product=B300)
    world.converge()
    revision = world.body["status"]["revisions"][-1]
    assert revision["good"] is False and REFUSED_ON_GPU in revision["failedReason"]
    assert "sglang-dspark-depth5-sm120-b300 on NVIDIA-B300-SXM6-AC" in revision["failedReason"]
    # Its engine would load and take traffic (a first revision's Service points at it): its Deployment goes.
    assert world.deployments == {}
    assert condition(world, "Ready")["reason"] == "KnownBadCombination"
    assert condition(world, "DrafterCompatible")["reason"] == "KnownBadCombination"
    assert any(e[1] == "KnownBadCombination" for e in world.events)
    world.product = None  # its pods gone, the node's product is unknown again
    world.converge()
    assert world.deployments == {}  # a failed revision is not started again until the spec changes
    assert condition(world, "DrafterCompatible")["reason"] == "KnownBadCombination"
    assert "sglang-dspark-depth5-sm120-b300" in condition(world, "Ready")["message"]


def test_placed_on_another_gpu_it_serves_and_with_allow_known_bad_it_warns():
    clean = PlacedWorld(dspark_body(5, allow=False), product=H100)
    clean.converge()
    assert clean.body["status"]["revisions"][-1].get("good") is True
    assert condition(clean, "DrafterCompatible")["reason"] == "NoKnownIssues"
    warned = PlacedWorld(dspark_body(5, allow=True), product=B300)
    warned.converge()
    assert warned.body["status"]["revisions"][-1].get("good") is True
    compatible = condition(warned, "DrafterCompatible")
    assert compatible["reason"] == "KnownBadCombination" and "serving anyway" in compatible["message"]


def test_a_swap_to_a_revision_refused_on_its_gpu_leaves_the_active_one_serving():
    world = PlacedWorld(dspark_body(7, allow=False), product=B300)
    world.converge()
    active = world.body["status"]["activeRevision"]
    assert world.body["status"]["revisions"][-1]["good"] is True
    world.ask_for_k(5)
    world.converge()
    status = world.body["status"]
    assert status["activeRevision"] == active and world.service["spec"]["selector"][
        "drafter.dev/revision"] == active
    assert status["revisions"][-1]["good"] is False and REFUSED_ON_GPU in status["revisions"][-1]["failedReason"]
    assert all(active in name for name in world.deployments)


def test_a_revision_that_already_serves_is_warned_about_never_torn_down():
    world = PlacedWorld(dspark_body(5, allow=False), product=None)  # the node's label is not read yet
    world.body["status"] = {}
    world.converge()  # pending: it starts and serves
    served = world.body["status"]["activeRevision"]
    assert world.body["status"]["revisions"][-1]["good"] is True
    world.product = B300  # the product becomes known while it serves
    world.converge()
    assert world.body["status"]["activeRevision"] == served and world.body["status"]["revisions"][-1]["good"] is True
    compatible = condition(world, "DrafterCompatible")
    assert compatible["reason"] == "KnownBadCombination" and "already served" in compatible["message"]

# ---------------------------------------------------------------------------------------------------
# kubectl drafter known-bad


def test_the_plugin_lists_every_row_with_its_keys_and_issue():
    table = packaged_table()
    out = plugin.render(table, "table")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "ENGINE", "VERSIONS", "METHODS"] and "ISSUE" in lines[0]
    for r in table.rows:
        line = next(line for line in lines if line.startswith(r.id + " "))
        assert (r.issue or r.source.split()[0].rstrip(",;")) in line
    assert f"{len(table.rows)} of {len(table.rows)} rows, table version {table.version}" in out


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_the_plugin_prints_the_rows_as_the_data_file_has_them(output):
    import json

    import yaml

    text = plugin.render(packaged_table(), output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert load_table(yaml.safe_dump(document)) == packaged_table()


def test_the_plugin_shows_the_rows_that_match_a_serving_or_wait_for_its_gpu():
    body = dspark_body(5, allow=True)
    pods = [{"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}}]
    nodes = [{"metadata": {"name": "n1", "labels": {GPU_PRODUCT_LABEL: B300}}}]
    placed = plugin.node_products(pods, nodes)
    assert placed == frozenset({B300}) and plugin.node_products(pods, []) is None
    assert plugin.serving_marks(body, placed) == {"sglang-dspark-depth5-sm120-b300": "match"}
    pending = plugin.serving_marks(body, None)
    assert pending == {"sglang-dspark-depth5-sm120-b300": "pending"}
    out = plugin.render(packaged_table(), "table", pending)
    assert out.splitlines()[0].startswith("SERVING") and "GPU pending" in out and "vllm-mtp-kimi" not in out
    assert "no known-bad row matches" in plugin.render(packaged_table(), "table", {})
    assert plugin.document(packaged_table(), pending)["rows"][0]["serving"] == "pending"


def test_outcomes_split_matches_from_pending_rows():
    facts = serving_facts(spec("sglang", "dspark", k=5), IMAGE["sglang"])
    matched, pending = outcomes(facts)
    assert matched == [] and [r.id for r in pending] == ["sglang-dspark-depth5-sm120-b300"]
    assert kb.DEFAULT == "default"

# ---------------------------------------------------------------------------------------------------
# The reconciler's node reads (controllers/serving/nodes.py)


class NodeKube:
    """GET of nodes by name: what NodeProducts sends."""

    def __init__(self, labels: dict[str, dict], forbidden: bool = False):
        self.labels, self.forbidden, self.asked = labels, forbidden, []

    def get(self, path: str):
        from drafter_operator.kube import ApiError

        self.asked.append(path)
        if self.forbidden:
            raise ApiError(403, "Forbidden", '{"message": "nodes is forbidden"}')
        name = path.rsplit("/", 1)[1]
        return {"metadata": {"name": name, "labels": self.labels[name]}} if name in self.labels else None


def test_node_products_are_read_by_name_once_and_remembered():
    import datetime as dt

    from drafter_operator.controllers.serving.nodes import NodeProducts
    from drafter_operator.controllers.serving.observe import Observed

    kube = NodeKube({"gpu-1": {GPU_PRODUCT_LABEL: B300}, "cpu-1": {}})
    nodes, now = NodeProducts(kube), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    observed = Observed(nodes={"r1": ("cpu-1", "gpu-1"), "r2": ("gone",)})
    nodes.fill(observed, now)
    assert observed.gpu_products("r1") is None and observed.node_products == {}
    assert nodes.read(("gpu-1", "cpu-1", "gone"), now)
    assert kube.asked == ["/api/v1/nodes/gpu-1", "/api/v1/nodes/cpu-1", "/api/v1/nodes/gone"]
    nodes.fill(observed, now)
    assert observed.gpu_products("r1") == frozenset({B300, ""}) and observed.gpu_products("r2") is None
    nodes.fill(observed, now + nodes.ttl)  # remembered for ttl, then read again when a row asks
    assert observed.node_products == {}


def test_denied_node_reads_stop_and_the_condition_asks_for_the_placement_pin():
    import datetime as dt

    from drafter_operator.controllers.serving.apply import ServingReconciler
    from tests.support.servings import IMAGES

    kube = NodeKube({}, forbidden=True)
    reconciler = ServingReconciler(kube, default_images=IMAGES, verify=False)
    world = PlacedWorld(dspark_body(5, allow=False))
    world.apply(world.decide())  # created: its pods are placed on gpu-node, whose label is unread
    state = world.state()
    now = dt.datetime(2026, 11, 29, 12, 1, tzinfo=dt.timezone.utc)
    state.observed.node_products = {}
    plan = reconciler.decide_placed(world.body, state.observed, None, now)
    assert kube.asked == ["/api/v1/nodes/gpu-node"] and plan.read_nodes == ()
    world.apply(plan)
    compatible = condition(world, "DrafterCompatible")
    assert compatible["reason"] == "GPUCheckPending" and "may not get nodes" in compatible["message"]
    assert "set spec.placement.gpuProduct" in compatible["message"]
    reconciler.decide_placed(world.body, world.state().observed, None, now)
    assert kube.asked == ["/api/v1/nodes/gpu-node"]  # denied once: not asked again


def test_a_refused_revision_serves_once_allowed_and_retried():
    world = PlacedWorld(dspark_body(5, allow=False), product=B300)
    world.converge()
    refused = world.body["status"]["revisions"][-1]["name"]
    assert world.deployments == {} and "kubectl drafter retry" in world.body["status"]["revisions"][-1]["failedReason"]
    world.body["spec"]["drafter"]["allowKnownBad"] = True  # not part of the revision's identity: the same revision
    world.body["metadata"]["annotations"] = {"drafter.dev/retry": "1"}
    world.converge()
    status = world.body["status"]
    assert status["activeRevision"] == refused and status["revisions"][-1]["good"] is True
    assert "serving anyway" in condition(world, "DrafterCompatible")["message"]


@given(pp=st.sampled_from([None, 1, 2, 4]), dp=st.sampled_from([None, 1, 2]), ep=st.sampled_from([None, False, True]))
def test_parallelism_set_in_spec_target_is_read_as_the_command_line_renders_it(pp, dp, ep):
    facts = serving_facts(spec(method="mtp", tp=4, pipeline_parallel_size=pp, data_parallel_size=dp,
                               expert_parallel=ep), IMAGE["vllm"])
    assert (facts.launch.pipeline_parallel, facts.launch.data_parallel) == (pp or 1, dp or 1)
    assert facts.launch.expert_parallel == (4 * (dp or 1) if ep else 1)


def test_rows_on_parallelism_match_the_spec_fields_as_they_matched_extra_args():
    rows = {r.id: r for r in packaged_table().rows}
    assert outcome(rows["vllm-mtp-pipeline-parallel"], spec(method="mtp", pipeline_parallel_size=2)) == "match"
    assert outcome(rows["vllm-mtp-pipeline-parallel"], spec(method="mtp", pipeline_parallel_size=1)) != "match"
    sglang_decode = spec("sglang", "mtp", steps=3, model="/models/GLM-5.2-FP8", data_parallel_size=8,
                         extra=("--disaggregation-mode", "decode"))
    assert outcome(rows["sglang-pd-decode-dp-attention-mtp-hang"], sglang_decode) == "match"
