"""Which language a text is in (German or English), by its function words. Pure.

Function words are a closed class, so a short list of them identifies the language of a
memory and, with the question words, of most questions ("Wann hat Müller bestellt?").
Words that both languages use ("in", "was", "so", "will", "an") count for neither. One rule
for everything that asks: the index stems a document by `detect_language` (`search_config`),
chat extraction and the offline answer speak the conversation's `detect_language`, and recall
gates BM25 evidence between a query and a memory of different languages by `language_of`,
which says "unknown" (None) instead of guessing.
"""

from __future__ import annotations

import re
from typing import Literal

SEARCH_LANGUAGES = ("english", "german")

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_GERMAN = frozenset(
    "der die das und ist nicht ein eine einen einem einer eines dem den des mit auf für fur von zu im ich du "
    "er sie wir ihr es sich auch wie wird werden wurde wurden worden würde sei sind war hat haben noch nach "
    "bei aus über uber oder aber wenn dass daß weil ob denn dann als kein keine schon sehr nur mehr viel viele "
    "vielen oft einige einigen manche manchen mein dein sein seine seiner seinen seinem ihre ihrer ihren ihrem "
    "unser euer diese dieser dieses diesen diesem vom zum zur ab bis seit unter zwischen gegen durch ohne "
    "hier dort gehen geht können kann muss müssen heute morgen gestern immer ja nein doch mal jedoch "
    "wer wen wem wessen welche welcher welches welchen welchem wann wo woher wohin warum wieso weshalb "
    "wofür wogegen womit wodurch worauf woran worin worüber wozu".split()
)
_ENGLISH = frozenset(
    "the and is are were be been not a of to on for with at by from it its this that these those "
    "i you he she we they him her his them my your our their what when where who whom whose which why how "
    "did do does have has had would can could should about into than then there because while but or if "
    "just really very yes no".split()
)


Language = Literal["de", "en"]

# +1 per German, -1 per English function word (the two sets share no word)
_BALANCE = {**dict.fromkeys(_GERMAN, 1), **dict.fromkeys(_ENGLISH, -1)}


def language_of(text: str) -> Language | None:
    """'de' or 'en' by which language's function words are more frequent; None when neither is
    ("Müller GmbH", "Rhodophyta?"): a name with an umlaut says nothing about the language a
    question is asked in."""
    balance = _balance(text)
    if balance == 0:
        return None
    return "de" if balance > 0 else "en"


def detect_language(text: str) -> Language:
    """'de' when German function words outnumber English ones and umlauts agree (they break a
    tie), else 'en'."""
    umlaut = any(ch in text for ch in "äöüßÄÖÜ")
    return "de" if _balance(text) + umlaut > 0 else "en"


def search_config(language: Language) -> str:
    """The PostgreSQL text-search configuration (stemmer) of a language."""
    return "german" if language == "de" else "english"


def _balance(text: str, limit: int = 4000) -> int:
    get = _BALANCE.get
    return sum(get(word, 0) for word in _WORD.findall(text[:limit].casefold()))
