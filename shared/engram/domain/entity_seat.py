"""Where a named organisation sits: a business fact with one value at a time (R-15.1). Pure.

"Der Kunde Koch Logistik sitzt in Kiel" and, weeks later, "Koch Logistik ist nach Hannover
umgezogen" are one fact and its new value, but consolidation's word rules could not tell: the
later statement swaps the place and leaves out "Kunde" (two words differ, not one value), and
"Dunmore Analytics has its office in Phoenix" / "Dunmore Analytics moved to Chicago" swap
"office" too. `bench.consolidation` missed exactly these three of its 28 updates. Two companies
of one trade ("Koch Logistik" / "Fischer Logistik", cosine 0.90 in e5) are not one: the name
must be the same.

`seats(text)`: each (organisation, place) the text gives: the organisation's name is the run of
capitalised words right before the verb, without a role in front of it ("Der Kunde", "Our
client"); the place the capitalised word after "in", "to", "nach" or "from". English and German:
"is based / headquartered / located in", "has its head office / headquarters in", "runs its
business from", "has its office in" (not "an office": it can have many), "moved / relocated (its
head office) to"; "sitzt in", "hat seinen Sitz (jetzt) in", "befindet sich in", "ist in ...
ansässig", "ist nach ... umgezogen", "zieht nach".

`moved(a, b)`: the organisation whose seat the two texts give as different places, else None.
Which of the two holds is the order of the statements (`consolidation.ordered`). `apart(a, b)`:
the two organisations when each text gives another's seat; consolidation keeps both.
`restated(a, b)`: the organisation when both texts say nothing but that it sits at the same place.
"""

from __future__ import annotations

import re
from functools import lru_cache

# names and places stay within a line: a title and its narrative are two sentences
_NAME = r"(?P<name>(?:[A-ZÄÖÜ][\w&'.-]* +){0,4}[A-ZÄÖÜ][\w&'.-]*)"
_PLACE = r"(?P<place>[A-ZÄÖÜ][\w'-]+(?:[ -][A-ZÄÖÜ][\w'-]+)?)"
_NOW = r"(?:now |jetzt |nun |inzwischen |since \w+ |seit \w+ )?"
_ITS = r"(?:its|their) (?:head office|office|headquarters|main office|seat|home)"  # the one seat, not "an office"
_SEATS = tuple(
    re.compile(p)
    for p in (
        rf"{_NAME} +(?:is|are) {_NOW}(?:based|headquartered|located|situated) in {_PLACE}",
        rf"{_NAME} +(?:has|have) {_NOW}{_ITS} in {_PLACE}",
        rf"{_NAME} +(?:runs|run) (?:its|their) business {_NOW}from {_PLACE}",
        rf"{_NAME} +(?:has |have )?{_NOW}(?:moved|relocated)(?: {_ITS})? {_NOW}to {_PLACE}",
        rf"{_NAME} +(?:sits|sitzt|residiert|befindet sich) {_NOW}in {_PLACE}",
        rf"{_NAME} +hat {_NOW}(?:seinen|ihren) (?:Haupt)?[Ss]itz {_NOW}in {_PLACE}",
        rf"{_NAME} +ist {_NOW}in {_PLACE} ansässig",
        rf"{_NAME} +(?:ist|sind) {_NOW}nach {_PLACE} (?:umgezogen|gezogen)",
        rf"{_NAME} +(?:zieht|zog) (?:\w+ )?{_NOW}nach {_PLACE}",
        rf"{_NAME} +hat (?:seinen|ihren) (?:Haupt)?[Ss]itz {_NOW}nach {_PLACE} verlegt",
    )
)
# a role before the name is not part of it: "Der Kunde Koch Logistik", "Our client Dunmore Analytics"
_ROLES = frozenset(
    "der die das den dem unser unsere unseren unserem the our a an kunde kundin kunden lieferant lieferantin"
    " partner partnerin firma customer client supplier vendor company".split()
)
# a person is no organisation: "I moved to Berlin", "Wir sind nach Kiel gezogen" (`life_topics`)
_PRONOUNS = frozenset("i we he she it they you ich wir er sie es ihr du man".split())


def seats(text: str) -> frozenset[tuple[str, str]]:
    """Each (organisation, place) `text` gives as where the organisation sits (see the module)."""
    return frozenset(seat for seat, _ in _read(text))


@lru_cache(maxsize=4_096)  # `seats` and `restated` read the same texts, pair after pair
def _read(text: str) -> tuple[tuple[tuple[str, str], bool], ...]:
    """Each seat `text` gives, and whether its line says nothing else (a role before the name and
    a full stop after the place at most)."""
    found = []
    for line in text.splitlines():
        for pattern in _SEATS:
            for match in pattern.finditer(line):
                words = match.group("name").split()
                before = line[: match.start()].split()
                while words and words[0].casefold() in _ROLES:
                    before, words = [*before, words[0]], words[1:]
                if words and not (len(words) == 1 and words[0].casefold() in _PRONOUNS):
                    alone = all(w.casefold() in _ROLES for w in before) and not line[match.end() :].strip(" .")
                    found.append(((" ".join(words), match.group("place")), alone))
    return tuple(found)


def moved(a: str, b: str) -> str | None:
    """The organisation whose seat `a` and `b` give as different places, else None."""
    return next(
        (name for name, place in sorted(seats(a)) for other, there in seats(b) if name == other and place != there),
        None,
    )


def apart(a: str, b: str) -> tuple[str, str] | None:
    """Two organisations, when `a` and `b` each give where one sits and none is the same: their
    statements are about different customers, however close the vectors ("Koch Logistik sitzt in
    Kiel" / "Fischer Logistik ist nach Hannover umgezogen", 0.90 in e5)."""
    sa, sb = seats(a), seats(b)
    if sa and sb and not {name for name, _ in sa} & {name for name, _ in sb}:
        return min(sa)[0], min(sb)[0]
    return None


def restated(a: str, b: str) -> str | None:
    """The organisation when every line of `a` and `b` says only that it sits at one and the same
    place ("Customer Harbor Energy sits in Miami" / "Harbor Energy has its office in Miami"): one
    statement in other words, whatever else the pool makes of their words."""
    read = [_read(a), _read(b)]
    lines = [len([line for line in text.splitlines() if line.strip()]) for text in (a, b)]
    said = {seat for found in read for seat, _ in found}
    if len(said) != 1 or any(
        len(found) != n or not all(alone for _, alone in found) for found, n in zip(read, lines, strict=True)
    ):
        return None
    return next(iter(said))[0]
