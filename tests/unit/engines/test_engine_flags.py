"""The engines' flag tables and their matching rules: owned destinations refused under any spelling.

The tables are generated from the real parsers (tests/contract checks they still match the wheels);
these tests check the operator's use of them without the engines installed.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from drafter_operator.api import DrafterServingSpec, serving_problems
from drafter_operator.api.serving import owned_flag
from drafter_operator.engines import ENGINES, command_line, flags, owned_spellings, sglang, vllm
from drafter_operator.engines.extra_args import owned_rule


def owned_options(engine: str) -> list[flags.Option]:
    module = ENGINES[engine]
    return [o for o in flags.table(engine).options
            if owned_rule(module.OWNED_DESTINATIONS, o.dest) and o.flags]


def takes_value(option: flags.Option) -> bool:
    return option.action in ("store", "append") or option.action.startswith("custom:") and option.nargs != 0


def a_value_for(option: flags.Option) -> str:
    """A value the option's own type accepts."""
    if option.choices:
        return option.choices[0]
    if option.type in ("int", "sglang:human_readable_int", "vllm:human_readable_int_or_auto") or (
            option.type or "").endswith("[int]"):
        return "2"
    if option.type == "float":
        return "0.5"
    if option.type and ("loads" in option.type or "parse_dataclass" in option.type or "parse_type" in option.type):
        return '{"method": "ngram", "num_speculative_tokens": 3}'
    return "x"


def test_tables_are_the_versions_the_default_images_run():
    assert flags.table("vllm").version == "0.33.0"
    assert flags.table("sglang").version == "0.5.23"
    assert flags.table("vllm").allow_abbrev and flags.table("sglang").allow_abbrev
    assert {"--speculative-config", "-sc"} <= set(flags.table("vllm").by_dest("speculative_config").flags)


def test_every_owned_destination_exists_in_its_engine_table():
    # An owned destination that no longer exists would silently protect nothing.
    for engine, module in ENGINES.items():
        dests = {o.dest for o in flags.table(engine).options} | {p.dest for p in flags.table(engine).positionals}
        for dest in [*module.OWNED_DESTINATIONS, *module.CAPTURE_OWNED_DESTINATIONS]:
            if dest.endswith("*"):
                assert any(d.startswith(dest[:-1]) for d in dests), dest
            else:
                assert dest in dests, f"{engine}: {dest}"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_exact_spelling_of_every_owned_option_is_refused(engine):
    module = ENGINES[engine]
    for option in owned_options(engine):
        for spelling in option.flags:
            args = [spelling, a_value_for(option)] if takes_value(option) else [spelling]
            problems = module.extra_args_problems(args)
            assert problems, (engine, args)
            assert "owns" in problems[0] or "refused by" in problems[0], problems


@st.composite
def respellings(draw, engine: str):
    """An owned option and a spelling of it the engine's parser accepts: prefix, underscores, =value."""
    option = draw(st.sampled_from([o for o in owned_options(engine) if o.flags[0].startswith("--")]))
    flag = draw(st.sampled_from([f for f in option.flags if f.startswith("--")]))
    # The shortest unique prefix, or longer.
    others = [f for o in flags.table(engine).options if o.dest != option.dest for f in o.flags]
    shortest = next((n for n in range(3, len(flag) + 1)
                     if not any(f.startswith(flag[:n]) for f in others)), len(flag))
    cut = draw(st.integers(shortest, len(flag)))
    spelled = flag[:cut]
    if engine == "vllm" and draw(st.booleans()):
        spelled = "--" + spelled[2:].replace("-", "_")
    if takes_value(option):
        value = a_value_for(option)
        return option, ([f"{spelled}={value}"] if draw(st.booleans()) else [spelled, value])
    return option, [spelled]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_spellings_of_owned_flags_never_get_through(engine, data):
    option, args = data.draw(respellings(engine))
    prefix = data.draw(st.sampled_from([[], ["--max-num-seqs", "8"] if engine == "vllm" else ["--max-running-requests", "8"]]))
    problems = ENGINES[engine].extra_args_problems([*prefix, *args])
    assert problems, (option.dest, args)


def test_vllm_dotted_keys_and_short_aliases_reach_the_speculative_config():
    for args in (["-sc.method", "ngram"], ["--speculative-config.method=ngram"], ["--speculative_config.model", "d"],
                 ["-sc.num_speculative_tokens+", "3"], ["--spec-model", "d"], ["--no-trust-remote-code"]):
        assert vllm.extra_args_problems(args), args
    parsed = command_line.parse("vllm", ["/m", "-sc.method", "ngram", "-sc.num_speculative_tokens=3"], with_defaults=False)
    assert parsed["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert parsed.given["speculative_config"] == "-sc.method"


def test_harmless_flags_pass_and_are_parsed_with_the_engine_types():
    assert vllm.extra_args_problems(["--max_num_seqs", "8", "--enforce-eager", "--max-num-batched", "16k"]) == []
    assert sglang.extra_args_problems(["--max-running-requests", "16", "--disable-radix-cache"]) == []
    parsed = command_line.parse("vllm", ["/m", "--max-model-len", "32k", "--max-num-batched-tokens", "2K"], with_defaults=False)
    assert parsed["max_model_len"] == 32000 and parsed["max_num_batched_tokens"] == 2048
    parsed = command_line.parse("sglang", ["--model-path", "/m", "--context-length", "32Ki"], with_defaults=False)
    assert parsed["context_length"] == 32768


@pytest.mark.parametrize("engine, args, fragment", [
    ("vllm", ["--max-num-seqs", "lots"], "invalid"),
    ("vllm", ["--po", "9000"], "ambiguous option"),
    ("vllm", ["--max-running-requests", "8"], "is a sglang flag, not a vllm one"),
    ("sglang", ["--cuda-graph-max-bs", "8"], "ambiguous option"),
    ("sglang", ["--max-num-seqs", "8"], "is a vllm flag, not a sglang one"),
    ("sglang", ["--attention-backend", "no-such-backend"], "invalid choice"),
])
def test_what_the_engine_parser_refuses_is_refused_with_its_reason(engine, args, fragment):
    problems = ENGINES[engine].extra_args_problems(args)
    assert len(problems) == 1 and fragment in problems[0] and "status 2" in problems[0], problems


def test_unknown_flags_pass_for_another_image_version_but_owned_ones_never_do():
    assert vllm.extra_args_problems(["--flag-of-a-newer-vllm", "1"], known_flags_only=False) == []
    assert vllm.extra_args_problems(["--flag-of-a-newer-vllm", "1", "--tensor-parallel", "2"], known_flags_only=False)


def test_owned_message_names_the_item_the_flag_and_the_field():
    [problem] = vllm.extra_args_problems(["--tensor_parallel", "4"])
    assert "'--tensor_parallel'" in problem and "--tensor-parallel-size" in problem
    assert "spec.target.tensorParallelSize" in problem


def test_admission_list_covers_every_exact_spelling_and_nothing_harmless():
    spellings = owned_spellings()
    assert "-tp" in spellings and "--served-model-name" in spellings and "--uds" in spellings
    assert owned_flag("--port=8000") and owned_flag("-sc.method") and owned_flag("--speculative-eagle-topk")
    assert not owned_flag("--portal") and not owned_flag("--max-num-seqs") and not owned_flag("8000")


def _spec(engine: str, **fields) -> DrafterServingSpec:
    raw = {"engine": engine, "target": {"model": "/models/Kimi-K2.5", **fields.pop("target", {})},
           "drafter": fields.pop("drafter", {"method": "none"}), **fields}
    return DrafterServingSpec.model_validate(raw)


def test_parser_names_are_checked_per_engine():
    # llama3_json is a vLLM tool parser; SGLang calls it llama3 and exits 2 on the vLLM name.
    assert serving_problems(_spec("vllm", target={"toolCallParser": "llama3_json"})) == []
    [problem] = serving_problems(_spec("sglang", target={"toolCallParser": "llama3_json"}))
    assert "spec.target.toolCallParser" in problem and "llama3" in problem
    [problem] = serving_problems(_spec("vllm", target={"reasoningParser": "deepseek-r1"}))
    assert "deepseek_r1" in problem


def test_ngram_on_sglang_refuses_the_fields_sglang_replaces():
    problems = serving_problems(_spec("sglang", drafter={"method": "ngram", "numSteps": 3, "eagleTopk": 1}))
    assert len(problems) == 2 and all("no effect with method ngram" in p for p in problems)
    assert serving_problems(_spec("sglang", drafter={"method": "ngram", "numDraftTokens": 8})) == []
    [problem] = serving_problems(_spec("sglang", drafter={"method": "eagle3", "model": "/models/d", "eagleTopk": 4}))
    assert "numSteps is required" in problem


def test_packaged_tables_are_valid_json_with_parser_registries():
    for engine in ("vllm", "sglang"):
        flag_table = flags.table(engine)
        assert len(flag_table.options) > 200
        assert "kimi_k2" in flag_table.registries["tool_call_parser"]
        assert json.dumps(flag_table.registries)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_secret_flag_is_refused_under_every_exact_spelling_without_echoing_the_value(engine):
    module = ENGINES[engine]
    table = flags.table(engine)
    assert module.SECRET_DESTINATIONS
    for dest, secret in module.SECRET_DESTINATIONS.items():
        option = table.by_dest(dest)
        assert option is not None, f"{dest} is not in the {engine} table"
        for flag in option.flags:
            for args in ([flag, "s3cret-value"], [f"{flag}=s3cret-value"]):
                problems = module.extra_args_problems(args)
                assert len(problems) == 1, (args, problems)
                assert "s3cret-value" not in problems[0]
                assert "spec.target.extraArgs" in problems[0] and "Secret" in problems[0]
                assert (secret.env in problems[0]) if secret.env else "$(NAME)" in problems[0]


#: What a credential's destination is called: an API key, a token (not a count of tokens), a password, a
#: secret. A flag table regenerated for a newer engine that brings one more fails the test below.
CREDENTIAL_NAME = re.compile(r"(api_key|(^|_)token|password|passwd|secret|credential)$")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_string_flag_named_like_a_credential_is_a_secret_destination(engine):
    credentials = {option.dest for option in flags.table(engine).options
                   if option.nargs != 0 and CREDENTIAL_NAME.search(option.dest) and "str" in (option.type or "")}
    assert credentials, f"the scan found no credential flag in the {engine} table: the pattern is wrong"
    assert credentials <= set(ENGINES[engine].SECRET_DESTINATIONS), \
        f"{engine} flags that carry a credential but are not refused in extraArgs: " \
        f"{sorted(credentials - set(ENGINES[engine].SECRET_DESTINATIONS))}"


def test_the_credential_scan_tells_a_token_from_a_count_of_tokens():
    assert [name for name in ("hf_token", "spec_tokens", "tokenizer", "max_num_batched_tokens", "api_key",
                              "ssl_keyfile_password", "ssl_keyfile") if CREDENTIAL_NAME.search(name)] == \
        ["hf_token", "api_key", "ssl_keyfile_password"]


def test_secret_flags_name_the_env_variable_the_engine_reads():
    assert vllm.SECRET_DESTINATIONS["hf_token"].env == "HF_TOKEN"
    assert vllm.SECRET_DESTINATIONS["api_key"].env == "VLLM_API_KEY"
    assert "VLLM_API_KEY" in vllm.extra_args_problems(["--api-key", "k"])[0]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_secret_flag_whose_value_is_an_env_reference_passes(engine):
    assert ENGINES[engine].extra_args_problems(["--api-key=$(ENGINE_API_KEY)"]) == []
    assert ENGINES[engine].extra_args_problems(["--api-key", "$(ENGINE_API_KEY)"]) == []
    # Only a whole reference: a literal around it is still a secret on the command line.
    assert ENGINES[engine].extra_args_problems(["--api-key=sk-$(ENGINE_API_KEY)"])


@settings(max_examples=50, deadline=None)
@given(secret=st.text(alphabet=st.characters(codec="ascii", categories=("L", "N")), min_size=8, max_size=40))
def test_a_refused_secret_never_appears_in_the_message(secret):
    for engine, flag in (("vllm", "--hf-token"), ("vllm", "--api-key"), ("sglang", "--ssl-keyfile-password")):
        # A secret that is a word of the message itself ("Deployme") says nothing: the message for a value made of
        # other characters shows what the text holds whatever the value.
        wording = ENGINES[engine].extra_args_problems([f"{flag}=~~~~~~~~"])
        assume(not any(secret in p for p in wording))
        problems = ENGINES[engine].extra_args_problems([f"{flag}={secret}"])
        assert problems and all(secret not in p for p in problems)


def test_abbreviated_secret_flags_are_refused():
    assert "--hf-token" in vllm.extra_args_problems(["--hf-tok", "x"])[0]
    assert "--admin-api-key" in sglang.extra_args_problems(["--admin-api", "x"])[0]


@pytest.mark.parametrize(("engine", "args"), [
    ("vllm", ["--hf-tokn=hf_SECRETVALUE"]), ("vllm", ["--hf-tokn", "hf_SECRETVALUE"]),
    ("sglang", ["--api-keyy", "SECRETVALUE"]), ("vllm", ["--max-num-seqs", "4", "SECRETVALUE"]),
])
def test_a_mistyped_flag_is_refused_naming_the_flag_but_not_its_value(engine, args):
    (problem,) = ENGINES[engine].extra_args_problems(args)
    assert "unrecognized arguments" in problem and "SECRETVALUE" not in problem
    assert (args[0].split("=")[0] in problem) if args[0] != "--max-num-seqs" else "a value without its flag" in problem


def test_a_flag_and_value_in_one_item_is_refused_without_the_value():
    problems = serving_problems(_spec("vllm", target={"extraArgs": ["--api-key sk-SECRETVALUE"]}))
    assert any("'--api-key' holds a flag and its value in one item" in p for p in problems)
    assert not any("SECRETVALUE" in p for p in problems)


# --- the named steps of vllm_rewrite and checked_extra_args ------------------------------------------------------

@pytest.mark.parametrize("args, spelled", [
    (["--max_model_len=8", "--speculative_config.num_speculative_tokens", "3"],
     ["--max-model-len=8", "--speculative-config.num_speculative_tokens", "3"]),  # underscores after the dot stay
    (["-O3", "-O=2"], ["--optimization-level", "3", "--optimization-level", "2"]),
    (["-O", "1", "-O", "x", "-O"], ["--optimization-level", "1", "-O", "x", "-O"]),  # -O alone needs a level after it
    (["value_with_underscore", "-x_y"], ["value_with_underscore", "-x_y"]),
])
def test_vllm_spelled(args, spelled):
    assert command_line.vllm_spelled(args) == spelled


def test_merge_dotted_keys_builds_one_object_per_key_after_the_other_arguments():
    kept, origin = command_line.merge_dotted_keys(
        ["-sc.method", "ngram", "--port", "1", "-sc.num_speculative_tokens=3", "--a=x.y", "--x.l+", "p,q"])
    assert kept == ["--port", "1", "--a=x.y", "-sc", '{"method": "ngram", "num_speculative_tokens": 3}',
                    "--x", '{"l": ["p", "q"]}']
    assert origin == {"-sc": "-sc.method", "--x": "--x.l+"}
    with pytest.raises(command_line.CommandLineRejected, match="-sc.method needs a value"):
        command_line.merge_dotted_keys(["-sc.method"])


@pytest.mark.parametrize("name, text, expected", [
    ("--speculative-config.method", "ngram", ("--speculative-config", {"method": "ngram"})),
    ("-sc.a.b", '{"c": 1}', ("-sc", {"a": {"b": {"c": 1}}})),
    ("-sc.max", "2k", ("-sc", {"max": 2000})),  # vLLM's human-readable integer
    ("-sc.max", "2K", ("-sc", {"max": 2048})),
    ("-sc.levels+", "1,8", ("-sc", {"levels": ["1", "8"]})),
])
def test_dotted_value(name, text, expected):
    assert command_line.dotted_value(name, text) == expected


def test_other_engine_hint_and_first_spellings():
    from drafter_operator.engines.extra_args import first_spellings, other_engine_hint

    assert other_engine_hint("vllm", ["--max-num-seqs", "8"]) == ""
    assert other_engine_hint("vllm", ["--max-running-requests=8"]) == (
        "; --max-running-requests is a sglang flag, not a vllm one")
    assert first_spellings("vllm", ["--max_num_seqs", "8", "--max-num-seqs", "4", "8"]) == {"max_num_seqs": "--max_num_seqs"}


def test_secret_and_owned_destination_problems():
    from drafter_operator.engines.extra_args import (
        OwnedDestination,
        SecretDestination,
        owned_destination_problem,
        secret_value_problem,
    )

    secret = SecretDestination("a Hugging Face token", "HF_TOKEN")
    assert secret_value_problem("--hf-token=$(TOKEN)", "--hf-token", secret, "$(TOKEN)") is None
    assert secret_value_problem("--api-key", "--api-key", secret, ["$(A)", "$(B)"]) is None
    said = secret_value_problem("--hf_token=hf_abc", "--hf-token", secret, "hf_abc")
    assert said.startswith("spec.target.extraArgs item --hf_token (the engine reads it as --hf-token) carries a "
                           "Hugging Face token") and "hf_abc" not in said
    assert secret_value_problem("--api-key", "--api-key", secret, ["$(A)", "plain"]) is not None
    owned = OwnedDestination("the port", "use the Service")
    assert owned_destination_problem("--port=1", "--port", None) is None
    assert owned_destination_problem("--port=1", "--port", owned) == (
        "spec.target.extraArgs item '--port=1' would change the port, which the operator owns: use the Service")
    assert "(the engine reads it as --port)" in owned_destination_problem("--po=1", "--port", owned)
