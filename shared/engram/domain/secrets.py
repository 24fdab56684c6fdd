"""Secrets are not memory: what Engram stores by itself keeps no credential and no card number.

A chat's messages become memory units as they were said (`conversation.chat_units`), and chat
extraction, conversation imports and business events write what they carry. A user who types
"the wifi password is Sonnenblume7" or pastes a card number to the assistant has not asked for
it to be remembered, and a memory is recalled into later chats and sent to a model with them.
So every observation Engram derives (trigger `chat` or `hook`) or an agent writes (`manual`
with source `agent`: an agent key, MCP), but not a person's own write nor a `consolidation` of
stored memories (see `ObservationDraft`), and every session summary has these withheld in its
text, the words around them kept:

- credentials said in words, German and English: a password, passphrase, PIN, passcode, TAN,
  OTP, security, one-time, backup, access, door or safe code, CVV, lock combination, wifi key,
  API key, token or security answer ("my PIN is 4711", "WLAN-Passwort lautet Sonnenblume7",
  "password: hunter2!", "der Tresorcode ist 8642", "the alarm code is 7 3 9 1") becomes "my PIN
  is [withheld]"; the short names ("code", "pass", "pw", "combination") only with a digit or a
  sign in the value ("the code is on GitHub" stays), as does a value five words after the name;
- a login given as a pair ("netflix login is jo@mail.com / Brightwater#81"): its second part;
- a key ("the key for the VPN is vpn-Kx92!mQ", "AWS_SECRET_ACCESS_KEY=..."), only a value of 8
  characters or more with letters and a digit or a sign; a lock that "opens with 5902"; a
  wallet's seed phrase (six words or more); a security question's answer after a dash or
  "answer:"; a card's Prüfnummer;
- payment card numbers: 13-19 digits, alone or grouped by spaces or hyphens, starting 2-6 and
  passing the Luhn check (python-stdnum), become "[card number withheld]", unless a business id
  names the number right before it ("Order 4532015112830366", "Rechnungsnr. ...") and no card
  does (one in ten such ids passes the check);
- the tokens `redaction.scrub` removes from logs: JWTs, bearer tokens, agent keys, `sk-` API
  keys, NKey seeds, passwords in URLs.

A memory then still says that a secret was given ("What is my wifi password?" recalls "the wifi
password is [withheld]"), not what it was. IBANs, phone numbers, customer and order numbers are
business facts and stay. Pure and deterministic; `bench.secrets` measures what it withholds on
labelled sets of both languages and what it changes in the benchmark corpora (LoCoMo, XQuAD,
the generated user-assistant chats).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stdnum import luhn

from engram.domain.redaction import scrub

WITHHELD = "[withheld]"
CARD_WITHHELD = "[card number withheld]"

# what names a credential: compounds end in the longer words ("Bankpasswort", "WLAN-Passwort",
# "Haustürcode", "Onlinebanking-PIN" by its hyphen); the short ones stand alone
_LONG_CUES = (
    r"passwor[dt]s?|passphrase|kennwort|passcode|geheimzahl|zugangscode|sicherheitscode|pin-?code|pin-?nummer"
    r"|(?:tür|tor|garagen|tresor|safe|schließfach|alarm|schlüssel|entsperr|sim)-?code"
    r"|(?:wlan|netzwerk)-?(?:schlüssel|key)|zahlenkombination|sicherheitsantwort|prüfnummer"
)
_SHORT_CUES = (
    r"pin|(?-i:TAN)|cvv|cvc|api[-_ ]?key|api[- ]?schlüssel|access[-_ ]?key|secret[-_ ]?key|access[-_ ]?token|token"
    r"|security[- ]code|verification[- ]code|one[- ]time[- ]code|login[- ]code|bestätigungscode|einmalcode"
    r"|(?:door|gate|garage|alarm|safe|lock|locker|entry|entrance|building|unlock)[- ]code"
    r"|(?:wifi|wi-fi|wlan|network)[- ]?key|confirmation[- ]code"
    r"|otp|one[- ]time[- ]password|(?:2fa|backup|recovery|padlock)[- ]code|(?:security|secret)[- ]answer"
    r"|(?:lock|padlock|locker|safe)[- ]combo"
)
# names that are a credential only with a digit or a sign ("the code is 4470", "pw: Garten2019",
# "the pass is Otter!992"; not "the pass is valid", "the code is on GitHub", "zip code 10115")
_WEAK_CUES = (
    r"pw|pwd|pass|combination|kombination"
    r"|(?<!zip )(?<!post )(?<!area )(?<!country )(?<!dress )(?<!bar )(?<!source )(?<!qr )(?<!qr-)(?<!promo )code"
)
_WEAK = re.compile(rf"(?i)(?:{_WEAK_CUES})")
# a key only with a value that has letters and digits or signs, 8 characters or more ("the key
# for the VPN is vpn-Kx92!mQ"; not "the key is under the mat", "the key date is 12 May")
_KEY_CUES = r"key|schlüssel"
_KEY = re.compile(rf"(?i)(?:{_KEY_CUES})")
_CUE = (
    rf"(?:[^\W\d_]*(?:{_LONG_CUES})|(?<![^\W\d_])(?:{_SHORT_CUES})|(?<![^\W\d_-])(?:{_WEAK_CUES}|{_KEY_CUES}))"
    r"(?![^\W\d_])"  # a whole word: "pass" is not "passport", "pin" not "pink"
)
# "is", "ist", "lautet", ":" ... between the cue and the secret, after at most five words of the
# same sentence ("the passcode for the office alarm is ...", "das Passwort für die Fritzbox steht
# hier: ...")
_SAYS = r"(?:is|was|are|ist|war|sind|lautet|lautete|heißt|heisst|reads|=|:)"
# "changed my password to ...", "die PIN auf ... geändert": only a token with a digit or a sign
_TO = r"(?:to|auf)"
# the words of `_SAYS`, `_TO` and the "now" after them, as `withhold` counts the words between
_LINKS = frozenset(
    ["", *"is was are ist war sind lautet lautete heißt heisst reads to auf now jetzt still noch nun".split()]
)
_QUOTED = r"[\"'“„‚‘«»]([^\"'“”„‚‘’«»\n]{1,80})[\"'”“‘’«»]"
_TOKEN = r"([^\s\"'“”„‚‘’«»]{3,80})"
_SPACED = r"(\d(?: \d){3,11})(?![^\W_])"  # "7 3 9 1": a code said digit by digit
_SAID = re.compile(
    rf"(?i)(?<![^\W\d_-])({_CUE})((?:\s+(?!(?:{_SAYS}|{_TO})\b)[^\s:=.!?]+){{0,5}}?\s*({_SAYS}|{_TO})"
    rf"(?:\s+(?:now|jetzt|still|noch|nun))?\s*)"
    rf"(?:{_QUOTED}|{_SPACED}|{_TOKEN})"
)
# "PIN 4711", "Passwort: Sommer2024!": a token with a digit or a sign right after the cue
_BARE = re.compile(
    rf"(?i)(?<![^\W\d_-])({_CUE})(\s*[:=]?\s*)(?![:=\[])([^\s\"'“”„‚‘’«»]*[\d!#$%&*+/=?@^_~][^\s\"'“”„‚‘’«»]*)"
)
# a login given as a pair ("netflix login is jo@mail.com / Brightwater#81", "Zugangsdaten: k.meier /
# Sturmvogel!3"): the part after the slash, if it has a letter and a digit or a sign (not "since
# 12/2024")
_PAIR = re.compile(
    r"(?i)(?<![^\W\d_])(?:login|log-in|credentials|zugangsdaten|anmeldedaten|logindaten)(?![^\W\d_])"
    r"[^.!?\n]{0,60}?[^\s/]*[^\W\d_@.][^\s/]*\s*/\s*"
    r"([^\s\"'“”„‚‘’«»/]*[^\W\d_][^\s\"'“”„‚‘’«»/]*)"
)
# a lock opened by a number ("the safe in the hotel room opens with 5902", "der Spind geht mit
# 4471 auf" is not caught): digits, maybe grouped, maybe ending in "#"
_OPENS = re.compile(
    r"(?i)(?<![^\W\d_])(?:[^\W\d_]*(?:safe|tresor|lock|schloss|door|tür|gate|tor|locker|spind))(?![^\W\d_])"
    r"[^.!?\n]{0,40}?(?<![^\W\d_])(?:opens|unlocks|öffnet|entsperrt)\s+(?:with|mit)\s+(?:the\s+|dem\s+)?(?:code\s+)?"
    r"(\d(?:[ -]?\d){2,11}#?)(?![\w-])"
)
# a wallet's seed or recovery phrase: six to 24 words after "is" or ":"; all of them are the secret
_PHRASE = re.compile(
    r"(?i)(?<![^\W\d_])(?:(?:seed|recovery|backup|secret|wallet)[- ]?(?:phrase|words)|mnemonic"
    r"|(?:seed|wiederherstellungs)-?(?:phrase|wörter))(?![^\W\d_])"
    rf"[^.!?\n:=]{{0,30}}?\s*{_SAYS}\s*((?:[^\W\d_]+[\s,]+){{5,23}}[^\W\d_]+)"
)
# a security question's answer: after "security question:" and a dash ("Sicherheitsfrage: Name
# des ersten Haustiers — Flocke"), or after "answer:"; one to three words that end the sentence
# ("Die Sicherheitsfrage nervt mich - wirklich." stays)
_ANSWERED = re.compile(
    r"(?i)(?<![^\W\d_])(?:security[- ]question|sicherheitsfrage)(?![^\W\d_])"
    r"(?:\s*:[^.!?\n]{0,80}?(?:\s[—–-]|[—–])|[^.!?\n]{0,80}?\s(?:answer|antwort)\s*[:=])"
    r"\s*([^\s.!?,;]{2,40}(?:\s[^\s.!?,;]{2,40}){0,2})\s*(?=[.!]?\s*$|[.!]\s)"
)
# each of these only where one of its words is (a regex over a long text costs 20-90 us)
_VALUE_RULES = (
    (("opens with", "unlocks with", "öffnet mit", "entsperrt mit"), _OPENS),
    (("phrase", "seed words", "recovery words", "wallet words", "mnemonic", "wiederherstellungs"), _PHRASE),
    (("security question", "security-question", "sicherheitsfrage"), _ANSWERED),
)
_VALUE_MARKS = tuple(mark for marks, _ in _VALUE_RULES for mark in marks)
# words that describe a credential instead of being one ("my password is wrong")
_NOT_SECRETS = frozenset(
    """
    not no wrong incorrect correct right same different new old expired invalid valid weak strong
    secure safe unsafe long short too very still now required needed missing empty blank changed
    reset locked blocked forgotten lost known unknown set saved stored there here the a an my your
    his her our their this that it simple easy hard complicated fine ok okay
    nicht kein keine falsch richtig gleich anders neu alt abgelaufen ungültig gültig schwach stark
    sicher unsicher lang kurz zu sehr noch jetzt nötig erforderlich leer geändert zurückgesetzt
    gesperrt vergessen verloren bekannt unbekannt gespeichert da hier der die das ein eine mein nun dann
    meine dein deine sein seine unser unsere ihr ihre dieses dieser es einfach schwer kompliziert
    """.split()
)
_TRAILING = ".,;:)]}"  # a password may end in "!" or "?": those are withheld with it
# cheap tests first: most texts name no credential and carry no token (`withhold` skips the
# patterns then; measured on the benchmark corpora, 80 -> 14 us per text)
_CUE_STEMS = (
    "passw",
    "kennw",
    "passphrase",
    "passcode",
    "geheimzahl",
    "schlüssel",
    "prüfnummer",
    "kombination",
    "combination",
    "token",
    "cvv",
    "cvc",
    "api",
    "access",
    "secret",
    "wifi",
    "wi-fi",
    "wlan",
    "network",
    "netzwerk",
    "code",
    "otp",
    "combo",
    "security answer",  # ("secret answer" has "secret")
    "security-answer",
    "sicherheitsantwort",
    "login",
    "log-in",
    "credential",
    "zugangsdaten",
    "anmeldedaten",
)
_SHORT_STEMS = ("pin", "pw", "pass", "key")  # as substrings in many words: a whole word is looked for
# "key" only with a digit after it in the sentence ("a key role" is common; a key's value has one)
_SHORT_WORD = re.compile(r"\b(?:pin|pwd?|pass|key(?=[^.!?\n]{0,80}\d))\b")
_TOKEN_MARKS = ("eyj", "bearer", "agentkey", "egk_", "sk-", "://")
_SEED_MARKS = ("SU", "SA", "SO")  # an NKey seed, in capitals
# a run of digits grouped by single spaces or hyphens, not inside a word, a phone number ("+49 ...")
# or a hyphenated id; it starts with a digit, so the regex engine skips to digits
_DIGIT_RUN = re.compile(r"\d(?<![\w+-]\d)(?:[ -]?\d){12,}(?![\w-])")
_GROUPS = re.compile(r"([ -])")
# a business id right before the number ("Order 4532015112830366", "invoice no. ...", "Bestellnummer:
# ...", "the tracking number is ..."): one in ten 16-digit numbers passes the Luhn check, and an order event
# that lost its order number is no memory of it. Unless a card is named just before ("pay order
# 77 with card ...", "card for the booking: ...")
_ID_BEFORE = re.compile(
    r"(?i)(?<![^\W\d_])(?:order|invoice|tracking|shipment|parcel|package|reference|ref|customer|contract"
    r"|case|transaction|bestell\w*|rechnung\w*|kunden\w*|sendung\w*|paket\w*|auftrag\w*|vorgang\w*|vertrag\w*"
    r"|lieferschein\w*|ticket\w*|referenz\w*)"
    r"(?:\s*(?:no\.?|nr\.?|number|nummer|id|#))?(?:\s+(?:is|was|ist|war|lautet))?\s*[:#]?\s*$"
)
_CARD_BEFORE = re.compile(r"(?i)card|karte|visa|master|amex|maestro|kredit|credit|debit|\bcc\b")
_BEFORE_CHARS = 40  # how far back a number's naming words are looked for


@dataclass(frozen=True)
class Withheld:
    text: str
    kinds: frozenset[str]  # "credential", "card", "token": what was withheld


def _token_secret(token: str, followed_by: str, *, signs_only: bool = False) -> bool:
    """A word after "password is" is the password unless it describes one. A bare word of letters
    counts only when the sentence ends with it ("the password is swordfish."), so "my password is
    too long" keeps its words."""
    word = token.rstrip(_TRAILING)
    if len(word) < 3 or word.rstrip("!?").casefold() in _NOT_SECRETS:
        return False
    if _has_sign(word):
        return True
    if signs_only:
        return False
    return token != word or not followed_by.strip() or followed_by.lstrip()[:1] in _TRAILING


def _cards(run: str) -> str:
    """`run` (digit groups and their separators) with each card number in it withheld: the
    longest span of whole groups of 13-19 digits, starting 2-6, that passes the Luhn check, from
    the first group where there is one, then the same in the rest ("table 1 4111 1111 1111 1111",
    two cards in a row)."""
    parts = _GROUPS.split(run)
    groups, separators = parts[0::2], parts[1::2]
    for i in range(len(groups)):
        digits, end = "", None
        for j in range(i, len(groups)):
            digits += groups[j]
            if len(digits) > 19:
                break
            if len(digits) >= 13 and digits[0] in "23456" and luhn.is_valid(digits):
                end = j
        if end is not None:
            before = "".join(g + s for g, s in zip(groups[:i], separators[:i], strict=True))
            after = "".join(s + g for s, g in zip(separators[end:], groups[end + 1 :], strict=True))
            return before + CARD_WITHHELD + (after[:1] + _cards(after[1:]) if after else "")
    return run


def _mixed(token: str) -> bool:
    """A key's value: 8 characters or more, with letters and a digit or a sign."""
    word = token.rstrip(_TRAILING)
    return len(word) >= 8 and any(c.isalpha() for c in word) and _has_sign(word)


def _has_sign(word: str) -> bool:
    """A digit or a sign in `word`, not counting a "!" or "?" that ends it ("legislation?")."""
    return any(not c.isalpha() for c in word.rstrip("!?"))


def _card(match: re.Match[str]) -> str:
    before = match.string[max(0, match.start() - _BEFORE_CHARS) : match.start()]
    if _ID_BEFORE.search(before) and not _CARD_BEFORE.search(before):
        return match.group(0)  # a business id, not a card
    return _cards(match.group(0))


def _names_credential(text: str, lowered: str) -> bool:
    if "TAN" in text or any(stem in lowered for stem in _CUE_STEMS):
        return True
    return any(stem in lowered for stem in _SHORT_STEMS) and _SHORT_WORD.search(lowered) is not None


def _carries_token(text: str, lowered: str) -> bool:
    return any(mark in lowered for mark in _TOKEN_MARKS) or any(mark in text for mark in _SEED_MARKS)


def _withheld(head: str, token: str) -> str:
    """`head` (the credential's name and what follows it) with `token`'s value withheld, the
    punctuation that ends the sentence kept."""
    word = token.rstrip(_TRAILING)
    return f"{head}{WITHHELD}{token[len(word) :]}"


def _cued_secret(cue: str, token: str, after: str, *, signs_only: bool) -> bool:
    """Whether `token`, named by `cue` ("password", "API key" ...), is the secret: not a mark
    already put in (`[...]`), a secret by its shape (`_token_secret`), and after a key's cue
    ("key", "Schlüssel") one of letters and digits mixed, not a word."""
    if token.startswith("[") or not _token_secret(token, after, signs_only=signs_only):
        return False
    return not (_KEY.fullmatch(cue) and not _mixed(token))


def withhold(text: str) -> Withheld:
    """`text` with its credentials, card numbers and tokens replaced (see the module's doc)."""
    kinds: set[str] = set()
    if not text:
        return Withheld(text, frozenset())

    def said(match: re.Match[str]) -> str:
        cue, between, connector = match.group(1), match.group(2), match.group(3)
        if match.group(4) is not None or match.group(5) is not None:  # quoted, or digit by digit
            kinds.add("credential")
            return f"{cue}{between}{WITHHELD}"
        token = match.group(6)
        # the fifth word between takes only a token with a digit or a sign ("the PIN pad at the
        # front desk is broken" stays)
        far = sum(1 for w in between.split() if w.strip(":=").casefold() not in _LINKS) >= 5
        weak = far or connector.casefold() in ("to", "auf") or _WEAK.fullmatch(cue) is not None
        if not _cued_secret(cue, token, text[match.end() : match.end() + 2], signs_only=weak):
            return match.group(0)
        kinds.add("credential")
        return _withheld(f"{cue}{between}", token)

    def bare(match: re.Match[str]) -> str:
        token = match.group(3)
        if not _cued_secret(match.group(1), token, "", signs_only=True):
            return match.group(0)
        kinds.add("credential")
        return _withheld(f"{match.group(1)}{match.group(2)}", token)

    def pair(match: re.Match[str]) -> str:
        token = match.group(1)
        if not _token_secret(token, "", signs_only=True):
            return match.group(0)
        kinds.add("credential")
        return _withheld(match.group(0)[: match.start(1) - match.start()], token)

    def value(match: re.Match[str]) -> str:  # `_OPENS`, `_PHRASE`, `_ANSWERED`: group 1 is the secret
        kinds.add("credential")
        start, end = match.start(1) - match.start(), match.end(1) - match.start()
        return f"{match.group(0)[:start]}{WITHHELD}{match.group(0)[end:]}"

    lowered = text.casefold()
    out = text
    if _names_credential(text, lowered):
        out = _PAIR.sub(pair, _BARE.sub(bare, _SAID.sub(said, out)))
    for marks, pattern in _VALUE_RULES:
        if any(mark in lowered for mark in marks):
            out = pattern.sub(value, out)
    carded = _DIGIT_RUN.sub(_card, out)
    if carded != out:
        kinds.add("card")
    scrubbed = scrub(carded) if _carries_token(text, lowered) else carded
    if scrubbed != carded:
        kinds.add("token")
    return Withheld(scrubbed, frozenset(kinds))


def without_secrets(text: str) -> str:
    return withhold(text).text


def may_hold_secrets(*texts: str) -> bool:
    """False when none of `texts` names a credential, carries a token's mark or a run of 13 or more
    digits: then `withhold` would change none of them. One pass over them all, for a draft's many
    short fields (an order event's title, narrative and facts: ~6 us each through `withhold`)."""
    joined = "\n".join(texts)
    lowered = joined.casefold()
    return (
        _names_credential(joined, lowered)
        or _DIGIT_RUN.search(joined) is not None
        or _carries_token(joined, lowered)
        or any(mark in lowered for mark in _VALUE_MARKS)
    )
