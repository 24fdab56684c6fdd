"""`python -m bench.injection [--json]`: flag rates of the ingest-time instruction detector
(`engram.domain.injection`) on a labelled set of injection attempts and benign business
sentences, German and English (`bench.injection_set`), against a naive keyword baseline in the
same run, plus its cost per text. The tuned set was written alongside the rules; the held-out
set afterwards, and never used to tune them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench._common import emit_json, machine, table
from bench.injection_set import BENIGN, HELD_OUT_BENIGN, HELD_OUT_INJECTIONS, INJECTIONS
from engram.domain.injection import instruction_signals, normalise

NAIVE_KEYWORDS = ("ignore", "ignoriere", "system prompt", "systemprompt", "you are now", "du bist jetzt", "jailbreak")


def naive(text: str) -> bool:
    """The baseline: a keyword list (what one would write in five minutes)."""
    lowered = normalise(text)
    return any(k in lowered for k in NAIVE_KEYWORDS)


def detector(text: str) -> bool:
    return bool(instruction_signals(text))


def rate(flag: Callable[[str], bool], texts: Sequence[str]) -> float:
    return sum(1 for t in texts if flag(t)) / len(texts)


def german(texts: Sequence[str]) -> list[str]:
    marks = ("ä", "ö", "ü", "ß", " der ", " die ", " das ", " und ", " ist ", "du ", "dem ", "ab sofort", "bitte")
    return [t for t in texts if any(m in f" {t.lower()} " for m in marks)]


def run() -> dict[str, Any]:
    sets = {
        "tuned": (INJECTIONS, BENIGN),
        "held_out": (HELD_OUT_INJECTIONS, HELD_OUT_BENIGN),
    }
    figures: dict[str, Any] = {"bench": "injection", **machine()}
    for name, (bad, good) in sets.items():
        for label, flag in (("detector", detector), ("naive", naive)):
            figures[f"{name}_{label}_injections_flagged"] = round(rate(flag, bad), 3)
            figures[f"{name}_{label}_benign_flagged"] = round(rate(flag, good), 3)
        figures[f"{name}_sizes"] = [len(bad), len(good)]
    de_bad, de_good = german(INJECTIONS), german(BENIGN)
    figures["tuned_detector_injections_flagged_de"] = round(rate(detector, de_bad), 3)
    figures["tuned_detector_benign_flagged_de"] = round(rate(detector, de_good), 3)
    figures["missed"] = [t for t in (*INJECTIONS, *HELD_OUT_INJECTIONS) if not detector(t)]
    figures["false_flags"] = [t for t in (*BENIGN, *HELD_OUT_BENIGN) if detector(t)]
    texts = [*INJECTIONS, *BENIGN] * 20
    started = time.perf_counter()
    for t in texts:
        detector(t)
    figures["detector_us_per_text"] = round((time.perf_counter() - started) / len(texts) * 1e6, 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.injection", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    f = run()
    rows = []
    for name in ("tuned", "held_out"):
        n_bad, n_good = f[f"{name}_sizes"]
        rows.append(
            [
                f"{name} ({n_bad} injections / {n_good} benign)",
                f"{f[f'{name}_detector_injections_flagged']:.0%}",
                f"{f[f'{name}_detector_benign_flagged']:.0%}",
                f"{f[f'{name}_naive_injections_flagged']:.0%}",
                f"{f[f'{name}_naive_benign_flagged']:.0%}",
            ]
        )
    table(
        "instruction-like content flagged",
        ["set", "detector: injections", "detector: benign", "naive: injections", "naive: benign"],
        rows,
    )
    if args.json:
        emit_json(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
