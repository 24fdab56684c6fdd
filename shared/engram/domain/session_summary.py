"""A session's summary as a memory (R-5.2): its narrative's layout, and what of it is searched. Pure.

A session's summary (an LLM's or `chat_extraction.offline_summary`) is one `context`
observation tagged `SUMMARY_TAG`. Its narrative lists the sections one per line, "Label: text"
(`SECTIONS`), so that whoever reads it, a person or the model a chat turn sends it to, sees which
is which. The labels are layout, and two sections describe the summary rather than the session:
"Completed" (how many answers to how many messages) and "Notes" ("offline summary (no language
model)"). Searched as words, they made every summary a match for every question with "learn",
"language", "model", "next", "answer" or "message" in it: 49 of the 413 questions of
`bench.assistant_chats --via chat --requests` (seed 21) hold one, and BM25's first eight for
"Which model do I get around in?" were summaries that said nothing of a car. `searched` is the
narrative without them, which BM25 reads (`search.body_text`); the stored narrative keeps its
layout, and the vector is made from it (`search.passage_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

from engram.domain.observation import Observation

SUMMARY_TAG = "session-summary"
SECTIONS = ("Request", "Investigated", "Learned", "Completed", "Next steps", "Notes")
ABOUT_THE_SUMMARY = frozenset({"Completed", "Notes"})  # how it was made, not what was said


def narrative(sections: Sequence[tuple[str, str]]) -> str:
    """The narrative of (label, text) sections: one "Label: text" line each, empty ones left out."""
    unknown = {label for label, _ in sections} - set(SECTIONS)
    if unknown:
        raise ValueError(f"not a section of a session summary: {sorted(unknown)}")
    return "\n".join(f"{label}: {text}" for label, text in sections if text.strip())


def is_summary(obs: Observation) -> bool:
    return SUMMARY_TAG in obs.tags


def searched(text: str) -> str:
    """A summary's narrative as it is searched: each section's text without its label, and
    without the sections about the summary itself (`ABOUT_THE_SUMMARY`). A line that is not a
    section (a narrative edited by hand) is searched as it is."""
    kept = []
    for line in text.splitlines():
        label, colon, rest = line.partition(": ")
        if colon and label in SECTIONS:
            if label not in ABOUT_THE_SUMMARY:
                kept.append(rest)
        else:
            kept.append(line)
    return "\n".join(kept)
