"""`python -m bench.secrets [--json]`: what `engram.domain.secrets.withhold` keeps out of memory.

1. A labelled set (`bench.secrets_set`, English and German): the share of secrets withheld (a
   message counts when none of its secret values is left in the text) and the share of benign
   messages changed, against a naive baseline in the same run (the word after "password",
   "Passwort" or "PIN", and every run of 13-19 digits).
2. The benchmark corpora, which hold no secrets: every text that `withhold` changes there is a
   false positive. LoCoMo dev turns (with their photo captions), XQuAD paragraphs and questions
   in both languages, and the generated user-assistant chats (`bench.chatgen`, seed 21).
3. Its cost per text, and per draft: the memory units of the LoCoMo conversations built as
   drafts of a chat (withheld) and of a manual write (kept as written), same fields, same run.

The corpora are read from `../shared/bench/` and never copied.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from stdnum import luhn

from bench._common import emit_json, machine, table
from bench.chatgen import generate
from bench.secrets_set import (
    BENIGN,
    CARD_CONTEXTS,
    HELD_OUT_2_BENIGN,
    HELD_OUT_2_SECRETS,
    HELD_OUT_3_BENIGN,
    HELD_OUT_3_SECRETS,
    HELD_OUT_4_BENIGN,
    HELD_OUT_4_SECRETS,
    HELD_OUT_BENIGN,
    HELD_OUT_SECRETS,
    ID_CONTEXTS,
    SECRETS,
)
from engram.domain.conversation import turn_units
from engram.domain.observation import ObservationDraft, TriggerSource
from engram.domain.secrets import _DIGIT_RUN, _cards, without_secrets

LOCOMO = Path("/work/shared/bench/locomo/dev.json")
XQUAD = Path("/work/shared/bench/xquad")
_NAIVE_WORD = re.compile(r"(?i)\b(password|passwort|pin)\b(\W+)(\S+)")
_NAIVE_DIGITS = re.compile(r"\d(?:[ -]?\d){12,18}")


def naive(text: str) -> str:
    """The baseline: the word after a keyword, and every long digit run (five minutes' work)."""
    return _NAIVE_DIGITS.sub("[withheld]", _NAIVE_WORD.sub(r"\1\2[withheld]", text))


def withheld_share(rule: Callable[[str], str], items: Sequence[tuple[str, tuple[str, ...]]]) -> float:
    return sum(1 for text, values in items if not any(v in rule(text) for v in values)) / len(items)


def changed_share(rule: Callable[[str], str], texts: Sequence[str]) -> float:
    return sum(1 for t in texts if rule(t) != t) / len(texts)


def locomo_texts(path: Path) -> list[str]:
    texts: list[str] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        for key, turns in sample["conversation"].items():
            if re.fullmatch(r"session_\d+", key):
                texts.extend(f"{t.get('text', '')} {t.get('blip_caption') or ''}".strip() for t in turns)
    return texts


def xquad_texts(folder: Path) -> list[str]:
    texts: list[str] = []
    for language in ("de", "en"):
        data = json.loads((folder / f"xquad.{language}.json").read_text(encoding="utf-8"))["data"]
        for article in data:
            for paragraph in article["paragraphs"]:
                texts.append(paragraph["context"])
                texts.extend(qa["question"] for qa in paragraph["qas"])
    return texts


def chat_texts() -> list[str]:
    texts: list[str] = []
    for sample in generate():
        for key, turns in sample["conversation"].items():
            if re.fullmatch(r"session_\d+", key):
                texts.extend(t["text"] for t in turns)
        texts.extend(q["question"] for q in sample["qa"])
    return texts


def unit_fields(path: Path) -> list[dict[str, Any]]:
    """The LoCoMo conversations' turn units as the fields of their drafts."""
    from bench.locomo import sessions_of

    fields: list[dict[str, Any]] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        units = turn_units(
            tenant_id="t", user_id="u", conversation_id=sample["sample_id"], sessions=sessions_of(sample)
        )
        fields.extend(u.model_dump(exclude={"trigger_source"}) for u in units)
    return fields


def draft_us(fields: list[dict[str, Any]], trigger: TriggerSource, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for f in fields:
            ObservationDraft(**f, trigger_source=trigger)
        best = min(best, time.perf_counter() - started)
    return best / len(fields) * 1e6


def changes(texts: Iterable[str]) -> list[list[str]]:
    return [[t, out] for t in texts if (out := without_secrets(t)) != t]


def luhn_numbers(count: int, seed: int = 21) -> list[str]:
    """`count` random numbers of 13-19 digits that start 2-6 and pass the Luhn check: what a card
    number looks like, and what one in ten business ids of that length looks like too."""
    rng = random.Random(seed)
    numbers = []
    for _ in range(count):
        body = str(rng.randint(2, 6)) + "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(12, 18) - 1))
        numbers.append(body + luhn.calc_check_digit(body))
    return numbers


def grouped(number: str) -> str:
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4))


def luhn_alone(text: str) -> str:
    """The card rule without the business-id exception (as before it): every Luhn-valid run."""
    return _DIGIT_RUN.sub(lambda m: _cards(m.group(0)), text)


def named_numbers(count: int = 300) -> dict[str, float]:
    """Luhn-valid numbers named as business ids (they must stay) and as cards (withheld; half of
    them written in groups of four): the share of texts whose number was withheld."""
    numbers = luhn_numbers(count)
    ids = [ID_CONTEXTS[i % len(ID_CONTEXTS)].format(n=n) for i, n in enumerate(numbers)]
    cards = [CARD_CONTEXTS[i % len(CARD_CONTEXTS)].format(n=grouped(n) if i % 2 else n) for i, n in enumerate(numbers)]
    return {
        "ids_withheld": round(changed_share(without_secrets, ids), 3),
        "ids_withheld_luhn_alone": round(changed_share(luhn_alone, ids), 3),
        "cards_withheld": round(changed_share(without_secrets, cards), 3),
        "cards_withheld_luhn_alone": round(changed_share(luhn_alone, cards), 3),
        "named_numbers": count,
    }


def run(locomo: Path, xquad: Path, repeats: int = 3) -> dict[str, Any]:
    figures: dict[str, Any] = {"bench": "secrets", **machine()}
    # round 1 tuned the rules on `tuned`; round 2 widened them on the misses of `held_out`, whose
    # figures are since then tuned ones too; `held_out_2` was written before round 2
    sets = {
        "tuned": (SECRETS, BENIGN),
        "held_out": (HELD_OUT_SECRETS, HELD_OUT_BENIGN),
        "held_out_2": (HELD_OUT_2_SECRETS, HELD_OUT_2_BENIGN),
        "held_out_3": (HELD_OUT_3_SECRETS, HELD_OUT_3_BENIGN),
        "held_out_4": (HELD_OUT_4_SECRETS, HELD_OUT_4_BENIGN),
    }
    for name, (bad, good) in sets.items():
        for label, rule in (("withhold", without_secrets), ("naive", naive)):
            figures[f"{name}_{label}_secrets_withheld"] = round(withheld_share(rule, bad), 3)
            figures[f"{name}_{label}_benign_changed"] = round(changed_share(rule, good), 3)
        figures[f"{name}_sizes"] = [len(bad), len(good)]
    everything = [*SECRETS, *HELD_OUT_SECRETS, *HELD_OUT_2_SECRETS, *HELD_OUT_3_SECRETS, *HELD_OUT_4_SECRETS]
    figures["missed"] = [t for t, values in everything if any(v in without_secrets(t) for v in values)]
    figures["benign_changed"] = changes(
        [*BENIGN, *HELD_OUT_BENIGN, *HELD_OUT_2_BENIGN, *HELD_OUT_3_BENIGN, *HELD_OUT_4_BENIGN]
    )
    figures.update(named_numbers())
    corpora = {"locomo": locomo_texts(locomo), "xquad": xquad_texts(xquad), "assistant_chats": chat_texts()}
    for name, texts in corpora.items():
        changed = changes(texts)
        figures[f"{name}_texts"] = len(texts)
        figures[f"{name}_changed"] = len(changed)
        figures[f"{name}_naive_changed"] = sum(1 for t in texts if naive(t) != t)
        figures[f"{name}_changed_examples"] = changed[:10]
    texts = [t for ts in corpora.values() for t in ts]
    started = time.perf_counter()
    for t in texts:
        without_secrets(t)
    figures["us_per_text"] = round((time.perf_counter() - started) / len(texts) * 1e6, 1)
    figures["chars_per_text"] = round(sum(map(len, texts)) / len(texts))
    fields = unit_fields(locomo)
    figures["unit_drafts"] = len(fields)
    figures["draft_us_manual"] = round(draft_us(fields, TriggerSource.manual, repeats), 1)
    figures["draft_us_chat"] = round(draft_us(fields, TriggerSource.chat, repeats), 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.secrets", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="LoCoMo dev.json")
    parser.add_argument("--xquad", type=Path, default=XQUAD, help="the folder of xquad.de.json and xquad.en.json")
    args = parser.parse_args(argv)
    f = run(args.locomo, args.xquad)
    rows = []
    for name in ("tuned", "held_out", "held_out_2", "held_out_3"):
        n_bad, n_good = f[f"{name}_sizes"]
        rows.append(
            [
                f"{name} ({n_bad} with secrets / {n_good} benign)",
                f"{f[f'{name}_withhold_secrets_withheld']:.0%}",
                f"{f[f'{name}_withhold_benign_changed']:.0%}",
                f"{f[f'{name}_naive_secrets_withheld']:.0%}",
                f"{f[f'{name}_naive_benign_changed']:.0%}",
            ]
        )
    table(
        "labelled messages",
        ["set", "withhold: secrets withheld", "withhold: benign changed", "naive: withheld", "naive: benign changed"],
        rows,
    )
    table(
        f"Luhn-valid numbers of 13-19 digits ({f['named_numbers']} random ones in each set)",
        ["named as", "withheld", "withheld by the Luhn check alone"],
        [
            ["a business id (must stay)", f"{f['ids_withheld']:.0%}", f"{f['ids_withheld_luhn_alone']:.0%}"],
            ["a card (must be withheld)", f"{f['cards_withheld']:.0%}", f"{f['cards_withheld_luhn_alone']:.0%}"],
        ],
    )
    table(
        f"texts changed in corpora without secrets ({f['us_per_text']} us per text of {f['chars_per_text']} chars)",
        ["corpus", "texts", "withhold changed", "naive changed"],
        [
            [n, f[f"{n}_texts"], f[f"{n}_changed"], f[f"{n}_naive_changed"]]
            for n in ("locomo", "xquad", "assistant_chats")
        ],
    )
    table(
        f"a memory unit's draft ({f['unit_drafts']} LoCoMo turn units, best of 3)",
        ["trigger", "us per draft"],
        [["manual (kept as written)", f["draft_us_manual"]], ["chat (secrets withheld)", f["draft_us_chat"]]],
    )
    for text in f["missed"]:
        print(f"missed: {text}")
    for text, out in f["benign_changed"]:
        print(f"benign changed: {text} -> {out}")
    if args.json:
        emit_json(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
