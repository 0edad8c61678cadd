"""`$(VAR)` expansion in a container's command, args and env values, as the kubelet does it
(k8s.io/kubernetes third_party/forked/golang/expansion): the kubelet's own cases, a differential property against an
independent model of its scan, and the runner's plan of an LWS worker pod."""

from __future__ import annotations

import re
import sys

from hypothesis import given
from hypothesis import strategies as st

from drafter_testbed import launch
from drafter_testbed.env_expansion import expand, expand_all

#: The variables of the kubelet's TestMapping.
KUBELET_VARIABLES = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
#: The kubelet's doExpansionTest cases, input and expected output (expand_test.go, Kubernetes v1.35.4).
KUBELET_CASES = [
    ("$(VAR_A)", "A"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)-1", "A-1"),
    ("___$(VAR_B)___", "___B___"),
    ("___$(VAR_C)", "___C"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$(VAR_REF)", "$(VAR_A)"),
    ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("$$$$$$$(VAR_A)", "$$$A"),
    ("$VAR_A)", "$VAR_A)"),
    ("${VAR_A}", "${VAR_A}"),
    ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("--$($($($($--", "--$($($($($--"),
    ("$($($($($--foo$(", "$($($($($--foo$("),
    ("foo0--$($($($(", "foo0--$($($($("),
    ("$(foo$$var)", "$(foo$$var)"),
    ("\n", "\n"),
    ("$£FOO", "$£FOO"),
    ("prefix-$€-suffix", "prefix-$€-suffix"),
    ("$中文", "$中文"),
]


def test_the_kubelets_own_cases():
    for text, expected in KUBELET_CASES:
        assert expand(text, KUBELET_VARIABLES) == expected, text


def test_env_values_expand_from_the_variables_defined_before_them():
    """The kubelet's TestMapMutation shape: each value sees the ones already resolved, and only those."""
    container = {"name": "c", "env": [{"name": "FOO", "value": "bar"}, {"name": "ZOO", "value": "$(FOO)-1"},
                                      {"name": "BLU", "value": "$(ZOO)-2"}, {"name": "EARLY", "value": "$(LATE)"},
                                      {"name": "LATE", "value": "x"}, {"name": "ESCAPED", "value": "$$(FOO)"}]}
    env = launch.container_env({"metadata": {"namespace": "ns"}}, container, "127.0.0.9", lambda *_: None)
    assert env == {"FOO": "bar", "ZOO": "bar-1", "BLU": "bar-1-2", "EARLY": "$(LATE)", "LATE": "x",
                   "ESCAPED": "$(FOO)"}


def _model(text: str, variables: dict[str, str]) -> str:
    """The kubelet's scan restated as one regular expression: at each `$`, in this order, `$$` is an escaped `$`,
    `$(NAME)` up to the first `)` a reference, `$(` without a `)` stays, `$x` stays; a final lone `$` stays."""
    def replace(match: re.Match) -> str:
        if match.group(1) is not None:
            return "$"
        if match.group(2) is not None:
            return variables.get(match.group(2), match.group(0))
        return match.group(0)
    return re.sub(r"\$(?:(\$)|\(([^)]*)\)|\(|.)", replace, text, flags=re.DOTALL)


NAMES = st.sampled_from(["A", "B", "LWS_WORKER_INDEX", "", "A B", "é"])
TEXT = st.text(alphabet=st.sampled_from(list("$()AB é\n-")), max_size=40)


@given(TEXT, st.dictionaries(NAMES, st.text(alphabet=st.sampled_from(list("$()xA")), max_size=6), max_size=4))
def test_expansion_agrees_with_an_independent_model_of_the_kubelets_scan(text, variables):
    assert expand(text, variables) == _model(text, variables)


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40), st.dictionaries(NAMES, st.text()))
def test_text_without_an_operator_is_left_alone(text, variables):
    assert expand(text, variables) == text


@given(TEXT, st.dictionaries(NAMES, st.text(max_size=6), max_size=4))
def test_an_escaped_operator_is_one_dollar_and_the_rest_expands_on_its_own(text, variables):
    assert expand("$$" + text, variables) == "$" + expand(text, variables)


@given(st.sampled_from(["A", "LWS_WORKER_INDEX", "A B"]), st.text(max_size=12), TEXT)
def test_a_defined_reference_is_its_value_never_expanded_again_and_an_undefined_one_stays(name, value, rest):
    assert expand(f"$({name})", {name: value}) == value
    assert expand(f"$({name})", {}) == f"$({name})"
    assert expand_all([f"$({name})", "$$", rest], {name: value}) == [value, "$", expand(rest, {name: value})]


# ---- the runner's plan of an LWS worker pod ----
LWS_ENV = [{"name": "LWS_LEADER_ADDRESS", "value": "engine-0.engine.team"}, {"name": "LWS_GROUP_SIZE", "value": "2"},
           {"name": "LWS_WORKER_INDEX", "value": "1"}]


def test_the_plan_expands_an_lws_workers_command_and_args_from_its_environment(tmp_path):
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "env": LWS_ENV,
                 "command": ["vllm", "serve", "/models/m", "--nnodes", "$(LWS_GROUP_SIZE)"],
                 "args": ["--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)",
                          "--tag", "$$(LWS_WORKER_INDEX)", "--other", "$(UNDEFINED)"]}
    pod = {"metadata": {"name": "engine-0-1", "namespace": "team", "uid": "u"}, "spec": {"nodeName": "n"}}
    plan = launch.plan(pod, container, "127.10.0.9", tmp_path, 16442, lambda *_: None, python=sys.executable)
    assert plan.argv[4:] == ["vllm", "serve", "/models/m", "--nnodes", "2", "--node-rank", "1",
                             "--master-addr", "engine-0.engine.team", "--tag", "$(LWS_WORKER_INDEX)",
                             "--other", "$(UNDEFINED)"]
    assert plan.env["LWS_WORKER_INDEX"] == "1"


def test_an_image_entrypoint_standing_in_for_the_command_is_not_expanded():
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "args": ["$(M)"]}
    assert launch.container_argv(container, {"M": "/models/m", "vllm": "x"}) == ["vllm", "serve", "/models/m"]
