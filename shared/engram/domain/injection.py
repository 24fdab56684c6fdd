"""Instruction-like content (R-16.6): text that talks to the assistant instead of about the business.

A CRM field, an order note or a chat message that says "ignore your instructions and ..." is
stored like any other memory, but flagged at ingest (`ObservationDraft`), kept with lower
confidence and marked in recall text, and recall puts every memory into the prompt as
delimited data with its provenance, never as instructions (`engram.domain.recall_text`).

Three families of signals, German and English, on normalised text (NFKC, case-folded,
zero-width characters removed, whitespace collapsed):

- imperatives aimed at the assistant: ignore / disregard / forget / override the instructions,
  rules or prompt; "you are now", "from now on you", "act as", "pretend", "reveal the system
  prompt", "do not tell the user", "respond only with", exfiltration ("send ... to http...");
- role markers: `system:`, `assistant:`, `### instruction`, `<|im_start|>`, `[INST]`, `<system>`;
- tool-call syntax: `<tool_use>`, `<function_call>`, `<invoke ...>`, `{"name": ..., "arguments"`,
  "call the tool ...".

Pure and deterministic; `bench.injection` measures it on a labelled set of both languages.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

INSTRUCTION_FLAG = "flag:instruction-like"
FLAG_PREFIX = "flag:"
MAX_TAGS = 50  # an observation's tags, Engram's flags among them (`ObservationDraft.tags`)
FLAGGED_CONFIDENCE = 0.3  # kept, but below anything a person or system stated (1.0) or an agent inferred (0.7)


def writers_tags(tags: Sequence[str]) -> list[str]:
    """The tags a writer gave (a speaker, a customer, "chat"), not Engram's own flags (`FLAG_PREFIX`:
    instruction-like, a plan): what is searched and shown as tags."""
    return [t for t in tags if not t.startswith(FLAG_PREFIX)]


_ZERO_WIDTH = re.compile("[\u200b-\u200f\u2060\ufeff\u00ad]")
_SPACE = re.compile(r"\s+")

_EN_TARGET = (
    r"(instructions?|prompts?|system prompt|guidelines|directives|programming|your rules|all rules|the rules above"
    r"|safety rules|previous rules|prior rules)"
)
_DE_TARGET = (
    r"(anweisung(en)?|instruktion(en)?|vorgaben|systemprompt|system-prompt|prompt|deine regeln|alle regeln"
    r"|vorherigen regeln|bisherigen regeln|sicherheitsregeln)"
)
_EXFIL_EN = r"(conversation|chat( history)?|history|memor(y|ies)|all data|the data|user data|system prompt|passwords?|credentials|api keys?|tokens?|instructions)"
_EXFIL_DE = r"(verlauf|chatverlauf|konversation|gespräch|gedächtnis|erinnerungen|alle daten|nutzerdaten|passw(ö|oe)rter|zugangsdaten|api-?schlüssel|systemprompt)"

SIGNALS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        # -- English imperatives aimed at the assistant
        ("override", rf"\b(ignore|disregard|forget|override|bypass)\b[^.!?]{{0,40}}?{_EN_TARGET}"),
        (
            "new-role",
            r"\b(you are now|from now on,? you|you will now|you must now|henceforth,? you|you are no longer|"
            r"pretend (to be|you are)|roleplay as|you (will |must |should |shall )?(now )?act as)\b|(^|[.!?:]\s)act as\b",
        ),
        (
            "new-instructions",
            r"\b(new|updated|real|actual|secret|hidden) (instructions|system prompt)\b|\byour (new|real|true) "
            r"(task|role|goal|purpose|instructions)\b",
        ),
        (
            "reveal",
            r"\b(reveal|print|show|output|repeat|leak|dump|tell me)\b[^.!?]{0,30}\b(system prompt|your (instructions|"
            r"prompt|rules|guidelines)|initial prompt|hidden (prompt|instructions))",
        ),
        (
            "conceal",
            r"\b((do not|don't|never) (tell|inform|warn|reveal (this|it) to|mention (this|it) to) the user|"
            r"without (telling|informing) the user)\b",
        ),
        ("answer-format", r"\b(always|only|from now on)?,? ?(respond|reply|answer) (only|exclusively) with\b"),
        ("jailbreak", r"\b(jailbreak|jailbroken|developer mode|dan mode|do anything now|unfiltered mode)\b"),
        (
            "exfiltrate",
            rf"\b(send|post|forward|upload|email|exfiltrate|copy)\b[^.!?]{{0,30}}{_EXFIL_EN}[^.!?]{{0,40}}"
            r"(https?://|www\.|[\w.-]+@[\w-]+\.)",
        ),
        (
            "assistant-address",
            r"\b(dear|hey|attention|note to|instructions for( the)?) (ai|assistant|model|chatbot|llm|claude|gpt)\b",
        ),
        # -- German
        (
            "override-de",
            rf"\b(ignorier(e|en|t)?|missachte|vergiss|vergessen sie|überschreib(e|en)?|umgeh(e|en)?)\b[^.!?]{{0,50}}?"
            rf"{_DE_TARGET}",
        ),
        (
            "new-role-de",
            r"\b(du bist (jetzt|ab sofort|nun|ab jetzt|ab heute)|ab (sofort|jetzt) (bist|antwortest|sollst|musst) du|"
            r"tu so,? als (ob|wärst)|verhalte dich (wie|als)|spiel(e)? die rolle|gib dich als|du agierst (jetzt |ab sofort )?als)",
        ),
        (
            "new-instructions-de",
            r"\b(deine|ihre) (neue|eigentliche|wahre)n? (anweisung(en)?|aufgabe|rolle|instruktion(en)?)\b|"
            r"\b(geheime|versteckte) (anweisung(en)?|instruktion(en)?|befehle)\b",
        ),
        (
            "reveal-de",
            r"\b(verrate|zeig(e)?|gib|nenne|wiederhole|druck(e)?)\b[^.!?]{0,30}\b(system-?prompt|deine "
            r"(anweisungen|regeln|instruktionen|vorgaben)|den (ursprünglichen )?prompt)",
        ),
        (
            "conceal-de",
            r"\b(sag|erzähl|verrate|teile?) (es |das |davon )?(dem|der) (nutzer|benutzer|anwender)(in)? (nichts|nicht)|"
            r"ohne (es )?(dem|den) (nutzer|benutzer)(in)? zu (sagen|informieren)",
        ),
        ("answer-format-de", r"\b(antworte|reagiere) (ab sofort |ab jetzt )?(nur|ausschließlich|immer) (noch )?mit\b"),
        (
            "exfiltrate-de",
            rf"\b(sende|schicke|leite|übermittle|lade|kopiere)\b[^.!?]{{0,30}}{_EXFIL_DE}[^.!?]{{0,40}}"
            r"(https?://|www\.|[\w.-]+@[\w-]+\.)",
        ),
        (
            "assistant-address-de",
            r"\b(liebe[rs]? |hallo |achtung,? )?(ki|assistent|sprachmodell|chatbot)\s*[,:]\s*(bitte )?"
            r"(ignoriere|vergiss|antworte|gib|sende|lösche|tu|verrate)",
        ),
        # -- role markers
        (
            "role-marker",
            r"(^|\s)(system|assistant|developer|human)\s*:\s*(you|du|ignore|ignoriere|new|neue|from now|ab sofort)\b|"
            r"###\s*(system|instruction|anweisung)|<\|im_(start|end)\|>|\[/?inst\]|<\s*/?\s*(system|assistant|instructions?)\s*>|"
            r"<<\s*/?sys\s*>>",
        ),
        # -- tool-call syntax
        (
            "tool-call",
            r"<\s*/?\s*(tool_use|tool_call|function_call|function_calls|invoke|antml:invoke)\b|"
            r"\{\s*\"(name|tool|tool_name)\"\s*:\s*\"[^\"]+\"\s*,\s*\"(arguments|parameters|input)\"|"
            r"\b(call|invoke) the (tool|function)\b|\brufe (das|die) (werkzeug|tool|funktion)\b",
        ),
    )
)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _ZERO_WIDTH.sub("", text).casefold()
    return _SPACE.sub(" ", text)


def instruction_signals(*texts: str) -> list[str]:
    """The names of the signals found in `texts` (empty: nothing instruction-like)."""
    joined = normalise("\n".join(t for t in texts if t))
    return [name for name, pattern in SIGNALS if pattern.search(joined)]


def is_instruction_like(*texts: str) -> bool:
    return bool(instruction_signals(*texts))
