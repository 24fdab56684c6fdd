"""Which language a text is in (German or English), by its function words. Pure.

One rule for everything that asks: the search index (which stemmer a document gets), chat
extraction (the conversation's language) and the offline answer.
"""

from __future__ import annotations

import re
from typing import Literal

SEARCH_LANGUAGES = ("english", "german")

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_GERMAN = frozenset(
    "der die das und ist nicht ein eine einen dem den des mit auf für fur von zu im ich du er sie wir ihr "
    "es sich auch wie wird werden wurde sind war hat haben noch nach bei aus über uber oder aber wenn dass "
    "daß kein keine schon sehr mein dein unser euer vom zum zur ab bis gehen geht können kann muss müssen "
    "heute morgen gestern immer ja nein doch mal".split()
)
_ENGLISH = frozenset(
    "the and is are was were be been not a an of to in on for with at by from it this that these those "
    "i you he she we they my your our their what when where who which how did do does have has had will "
    "would can could should about just really so very yes no".split()
)


Language = Literal["de", "en"]


def detect_language(text: str) -> Language:
    """'de' when German function words outnumber English ones (an umlaut counts as one), else 'en'."""
    words = [w.casefold() for w in _WORD.findall(text[:4000])]
    german = sum(w in _GERMAN for w in words)
    english = sum(w in _ENGLISH for w in words)
    if any(ch in text for ch in "äöüßÄÖÜ"):
        german += 1
    return "de" if german > english else "en"


def search_config(language: Language) -> str:
    """The PostgreSQL text-search configuration (stemmer) of a language."""
    return "german" if language == "de" else "english"
