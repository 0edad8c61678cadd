"""Build the emulator's tokenizer (``drafter_operator/data/tokenizer/``) reproducibly.

    python -m drafter_testbed.emulator.build_tokenizer           # (re)write the shipped files
    python -m drafter_testbed.emulator.build_tokenizer --check   # exit 1 if they differ from a rebuild

No model hub is reachable where the emulator runs, so the project trains its own small byte-level BPE
(the GPT-2/Qwen family's scheme: any UTF-8 text encodes, nothing is unknown) with the ``tokenizers``
library, on a corpus generated here from a fixed seed: the emulator's own output words (each must
become one token, so a client that re-tokenizes the generated text counts what ``usage`` says) and a
list of common English words, digits and punctuation. Training runs on one thread so the merges do
not depend on the machine.

The directory is a Hugging Face tokenizer directory (``tokenizer.json`` + ``tokenizer_config.json``
with a ChatML chat template), so clients load it with ``AutoTokenizer.from_pretrained(<dir>)``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

# Before the Rust library starts its thread pool: one thread makes training deterministic.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from drafter_testbed.emulator.engine import VOCABULARY  # noqa: E402  (the words the emulator generates)
from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR  # noqa: E402

VOCAB_SIZE = 4096
SEED = 20261130
SENTENCES = 30_000

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

#: ChatML, as Qwen-style instruct models use it. Rendered by transformers' apply_chat_template in clients
#: and by emulator/tokenizer.py (same Jinja options) in the emulator, so both count the same tokens.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- elif message['content'] is not none %}"
    "{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

COMMON_WORDS = """
a about above after again against all also always am an and another any are around as ask at away back
be because been before being below best better between big both but by call came can case change child
city close come could country course day did different do does doing done down during each early end
even every example eye face fact family far feel few find first follow food for form found four from
full get give go good great group had hand hard has have he head help her here high him his home house
how however i idea if important in into is it its just keep kind know large last late later learn leave
left less let life light like line little live long look made make man many may me mean might more most
move much must my name near need never new next night no not now number of off often old on once one
only open or order other our out over own page part people place play point possible power problem
program question quick read real right room run said same say school see seem set she should show side
since small so some something sound start state still story study such system take tell than that their
them then there these they thing think this those thought three through time to today together too
turn two under until up upon us use very want was water way we well went were what when where which
while white who why will with without word work world would write year yes yet you young your
answer explain summarize translate describe list write code function python data model token request
response server user assistant system message please thanks hello question value error result test
able across act action activity add age ago agree air allow almost alone along already although among
amount animal appear apply area argue arm art article artist author available avoid baby bad bag ball
bank bar base beat beautiful become bed begin behavior behind believe benefit beyond bill bit black
blood blue board body book born box boy break bring brother budget build building business buy camera
campaign cancer candidate capital car card care career carry catch cause cell center central century
certain chair challenge chance character charge check choice choose church citizen claim class clear
clearly cold collection college color common community company compare computer concern condition
conference consider consumer contain continue control cost cover create crime cultural culture cup
current customer cut dark daughter dead deal death debate decade decide decision deep defense degree
democratic department design despite detail determine develop development die difference difficult
dinner direction director discover discuss disease doctor dog door dream drive drop drug economic
economy edge education effect effort eight either election else employee energy enjoy enough enter
entire environment especially establish evening event ever everybody everyone everything evidence
exactly exist expect experience expert explain factor fail fall far fast father fear federal field
fight figure fill film final finally financial fine finger finish fire firm fish five floor fly focus
force foreign forget former forward free friend front fund future game garden gas general generation
girl glass goal government green ground grow growth guess gun guy hair half hang happen happy health
hear heart heat heavy history hit hold hope hospital hot hotel hour huge human hundred husband image
imagine impact improve include including increase indeed indicate individual industry information
inside instead institution interest international interview investment issue item itself job join
key kill kitchen knowledge land language laugh law lawyer lay lead leader least leg legal level lie
likely listen local lose loss lot love low machine magazine main maintain major majority manage
management manager market marriage material matter maybe measure media medical meet meeting member
memory mention method middle military million mind minute miss mission modern moment money month
morning mother mouth movement movie music myself nation national natural nature necessary network
news newspaper nice none nor north note nothing notice occur offer office officer official oil ok
operation opportunity option organization others outside owner painting paper parent particular
partner party pass past patient pattern pay peace per perform performance perhaps period person
personal phone physical pick picture piece plan plant player policy political poor popular
population position positive practice prepare present president pressure pretty prevent price
private probably process produce product production professional professor project property protect
prove provide public pull purpose push quality quickly quite race radio raise range rate rather reach
ready realize really reason receive recent recently recognize record red reduce reflect region relate
relationship religious remain remember remove report represent require research resource respond
rest return reveal rich rise risk road rock role rule safe scene science scientist score sea season
seat second section security seek sell send senior sense series serious serve service seven several
share shoot short shot shoulder significant similar simple simply single sister sit site situation
six size skill skin social society soldier son song soon sort source south southern space speak
special specific speech spend sport spring staff stage stand standard star statement station stay
step stock stop store strategy street strong structure student stuff style subject success successful
suddenly suffer suggest summer support sure surface table talk task tax teach teacher team technology
television ten tend term terms thank theory thousand threat throughout throw thus total tough toward
town trade traditional training travel treat treatment tree trial trip trouble true truth try type
understand unit university usually various version view violence visit voice vote wait walk wall war
watch weapon wear week weight west western whatever whether whole whom wide wife win wind window wish
within woman wonder worker worry wrong yard yeah
running played using called working looking trying asked needed seemed showed started provided
""".split()

PUNCTUATION = list(".,;:!?()[]{}\"'-/*=+<>#%&@_") + ["...", "\n", "\n\n", "```"]


def corpus(seed: int = SEED, sentences: int = SENTENCES) -> list[str]:
    """Deterministic training text: chat-like sentences over the word lists, plus numbers and marks."""
    rng = random.Random(seed)
    words = [*COMMON_WORDS, *VOCABULARY, *VOCABULARY]  # the emulator's words twice as often
    lines = []
    for _ in range(sentences):
        parts = []
        for _ in range(rng.randint(4, 24)):
            roll = rng.random()
            if roll < 0.06:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 6))))
            elif roll < 0.14:
                parts[-1:] = [(parts[-1] if parts else "") + rng.choice(PUNCTUATION)]
            else:
                word = rng.choice(words)
                parts.append(word.capitalize() if rng.random() < 0.08 else word)
        lines.append(" ".join(parts))
    return lines


def build(out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(), trainer=trainer)

    missing = [w for w in VOCABULARY if len(tokenizer.encode(" " + w, add_special_tokens=False).ids) != 1]
    if missing:
        raise SystemExit(f"build_tokenizer: these emulator words are not single tokens: {missing}")

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": END_OF_TEXT,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special = {"eos_token": IM_END, "pad_token": END_OF_TEXT, "additional_special_tokens": [IM_START, IM_END]}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2, sort_keys=True) + "\n")


FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def differences(shipped: Path) -> list[str]:
    """Files under ``shipped`` that a fresh build does not reproduce byte for byte."""
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        return [name for name in FILES
                if not (shipped / name).is_file() or (shipped / name).read_bytes() != (Path(tmp) / name).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the shipped files")
    parser.add_argument("--out", type=Path, default=TOKENIZER_DIR)
    args = parser.parse_args(argv)
    if args.check:
        diff = differences(args.out)
        if diff:
            print(f"build_tokenizer: {', '.join(diff)} in {args.out} differ from a rebuild", file=sys.stderr)
            return 1
        return 0
    build(args.out)
    size = sum((args.out / name).stat().st_size for name in FILES)
    print(f"build_tokenizer: wrote {args.out} ({size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
