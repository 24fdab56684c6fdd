"""Conversation turns as memory units (R-5.2, R-6): one observation per turn, scored with its context.

What moved retrieval quality most was the unit, not the model: a turn is indexed together with
its neighbouring turns, the session date and the speaker, and it keeps the turn id as
provenance, so a hit points at exactly one turn. The turn, its speaker and its date are the
observation's title and narrative (embedded); the neighbouring turns are its discovery tokens
(BM25 only), so the lexical list sees the context and the vector list the turn itself, with
the question of the turn before when it answers one (`closing_question`).
Chat extraction can store its turns the same way; the LoCoMo benchmark stores its
conversations through this. `derived_units` adds the units beyond the single turn
(`memory_units`: a person's sentences, sessions, names), which recall maps back to turns.
"""

from __future__ import annotations

import re
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from engram.domain.chat_extraction import sentences
from engram.domain.memory_units import (
    PASSAGE_TYPE,
    DerivedUnit,
    Speech,
    UnitKind,
    derived_key,
    entity_units,
    first_turn,
    passage_units,
    session_unit,
    source_ref,
    statement_units,
)
from engram.domain.observation import ObservationDraft, Priority, Provenance, Scope, Source, TriggerSource

TITLE_MAX = 500
NEIGHBOUR_CHARS = 400
TURN_WINDOW = 2  # `turn_units`: the turns either side of a turn that are its context
CLOSING_CHARS = 600  # `closing_question`: the end of a turn its question is looked for in
# `bursts`: one speaker's consecutive messages are one unit, up to this many characters or messages
BURST_CHARS = 500
BURST_MESSAGES = 20
BURST_ID_CHARS = 400  # its message ids, space-separated, fit `source_event_id` (512) beside the conversation id
REACTION_WORDS = 2  # the other person's message this short does not end a burst (`bursts`)
UNIT_TYPE = "context"
# what `ConversationIngest` and the chat path derive unless told otherwise: the user's statements
# and the assistant's passages (both only in a chat with an assistant). Session and entity units
# are built on request (`kinds`); measured, they did not add recall (bench/RESULTS.md)
DERIVED_KINDS = frozenset({UnitKind.statement, UnitKind.passage})
# `likely_assistants`: names an assistant goes by in exported chats, and how long its turns are
ASSISTANT_NAMES = frozenset(
    {"assistant", "assistent", "assistentin", "ai", "ai assistant", "ki", "bot", "chatbot", "chatgpt", "gpt", "claude"}
)
ASSISTANT_MEDIAN_WORDS = 60
ASSISTANT_LENGTH_RATIO = 3.0
CHAT_SPEAKERS = {"user": "User", "assistant": "Assistant"}  # `chat_units`: a chat message's role as its speaker


@dataclass(frozen=True)
class Turn:
    turn_id: str  # stable within the conversation, e.g. LoCoMo's dia_id "D3:7" or a chat message id
    speaker: str
    text: str
    image_caption: str | None = None  # what a shared picture shows (alt text), if any

    def spoken(self, limit: int | None = None) -> str:
        text = " ".join(self.text.split())
        if self.image_caption:
            text = f"{text} [shares a photo: {' '.join(self.image_caption.split())}]".strip()
        if limit is not None and len(text) > limit:
            text = text[: limit - 1].rsplit(" ", 1)[0] + "…"
        return text


@dataclass(frozen=True)
class ConversationSession:
    session_id: str
    started_at: datetime
    turns: Sequence[Turn]


def bursts(turns: Sequence[Turn]) -> list[Turn]:
    """A session's turns with each run of one speaker's consecutive messages joined into one turn
    (up to `BURST_CHARS` characters, `BURST_MESSAGES` messages and `BURST_ID_CHARS` characters of
    ids), whose `turn_id` is the messages' ids, space-separated (turn ids hold no whitespace).

    People on a messenger send a thought as a burst of short messages ("guess what", "I got the
    job!!", "starting in May"); one message alone is too little to embed or match, and the burst
    is what a written dialogue (LoCoMo) has as one turn. A unit then stands for its messages: a
    hit cites them all (`provenance.source_event_id` "conversation#id1 id2 ..."). The other
    person's reaction inside a run ("haha", "oh no": at most `REACTION_WORDS` words, no photo,
    and the run goes on with a longer message) does not end it: it is folded in where it was
    said ("... got the job!! [Ben: wow] starting in May"), so it neither splits the thought nor
    becomes a unit that is only a name and a date. Turns that alternate between speakers are
    returned as they are (LoCoMo dev: 3 places of its 2,760 turns are joined, each two turns across
    a "Thanks!", "Agreed!" or "Same here!")."""
    spoken = [t for t in turns if t.spoken()]
    out: list[Turn] = []
    run: list[Turn] = []
    chars = 0

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            text = " ".join(t.spoken() for t in run)
            out.append(Turn(turn_id=" ".join(t.turn_id for t in run), speaker=run[0].speaker, text=text))

    def fits(turn: Turn, text: str) -> bool:
        ids = sum(len(t.turn_id) + 1 for t in run) + len(turn.turn_id)
        return chars + 1 + len(text) <= BURST_CHARS and len(run) < BURST_MESSAGES and ids <= BURST_ID_CHARS

    for i, turn in enumerate(spoken):
        text = turn.spoken()
        if run and turn.speaker != run[0].speaker and _reaction(turn):
            after = spoken[i + 1] if i + 1 < len(spoken) else None
            folded = f"[{turn.speaker}: {text}]"
            if after is not None and after.speaker == run[0].speaker and not _reaction(after) and fits(turn, folded):
                run.append(Turn(turn.turn_id, run[0].speaker, folded))
                chars += 1 + len(folded)
                continue
        if run and (turn.speaker != run[0].speaker or not fits(turn, text)):
            close()
            run, chars = [], 0
        run.append(turn)
        chars += len(text) + (1 if len(run) > 1 else 0)
    close()
    return out


def _reaction(turn: Turn) -> bool:
    return not turn.image_caption and len(turn.text.split()) <= REACTION_WORDS


def likely_assistants(sessions: Sequence[ConversationSession]) -> frozenset[str]:
    """The speakers of a conversation that are an assistant, for a caller that cannot say (an
    imported chat export): those named like one ("assistant", "ChatGPT", "KI"), as long as
    someone else speaks too; else, between exactly two speakers, the one whose turns run long
    (a median of at least 60 words, and at least three times the other's median). People
    chatting (LoCoMo dev: medians of 20-28 words each) have none. An assistant's turns are then low
    priority and not split into statements (`turn_units`, `memory_units.statement_units`)."""
    words: dict[str, list[int]] = {}
    for session in sessions:
        for turn in session.turns:
            words.setdefault(turn.speaker, []).append(len(turn.spoken().split()))
    named = frozenset(s for s in words if " ".join(s.casefold().split()) in ASSISTANT_NAMES)
    if named and len(named) < len(words):
        return named
    if len(words) != 2:
        return frozenset()
    (long, long_words), (_, short_words) = sorted(
        ((speaker, statistics.median(n)) for speaker, n in words.items()), key=lambda sw: -sw[1]
    )
    if long_words >= ASSISTANT_MEDIAN_WORDS and long_words >= ASSISTANT_LENGTH_RATIO * max(1.0, short_words):
        return frozenset({long})
    return frozenset()


def unit_key(conversation_id: str, turn_id: str) -> str:
    return f"turn:{conversation_id}:{turn_id}"[:200]


def provenance_ref(conversation_id: str, turn_id: str) -> str:
    """`source_event_id` of a turn unit: conversation and turn id, so a hit cites its turn."""
    return f"{conversation_id}#{turn_id}"


def session_uuid(conversation_id: str, session_id: str) -> uuid.UUID:
    """A stable id for a conversation's session: the turn units of one session share it, which
    recall's session support (topic locality) reads from `provenance.session_id`. A session id
    that is a UUID already (a chat session, `chat_units`) is kept, so units cite the real session."""
    try:
        return uuid.UUID(session_id) if len(session_id) == 36 else _derived_session(conversation_id, session_id)
    except ValueError:
        return _derived_session(conversation_id, session_id)


def _derived_session(conversation_id: str, session_id: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"engram:conversation:{conversation_id}:session:{session_id}")


def turn_id_of(source_event_id: str | None) -> str | None:
    if not source_event_id or "#" not in source_event_id:
        return None
    return source_event_id.rsplit("#", 1)[1]


def _chunks(text: str, size: int = 200) -> list[str]:
    """Discovery tokens hold at most 200 characters each: split at word boundaries."""
    chunks: list[str] = []
    current = ""
    for word in text.split():
        word = word[:size]
        if current and len(current) + 1 + len(word) > size:
            chunks.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        chunks.append(current)
    return chunks


def _title(turn: Turn) -> str:
    title = f"{turn.speaker}: {turn.spoken()}"
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1].rsplit(" ", 1)[0] + "…"
    return title


def closing_question(answer: str) -> str | None:
    """The question a turn ends with ("Which car do you drive?", "Where did you go?"), if one of
    its last two sentences is one: what the next speaker's turn may answer in a few words."""
    for sentence in reversed(sentences(answer[-CLOSING_CHARS:])[-2:]):
        if sentence.endswith("?"):
            return sentence
    return None


def answered_question(narrative: str, speaker: str) -> tuple[str, str] | None:
    """The question a turn unit's narrative says it answers and the reply (`turn_units`:
    "On <day>, <other> asked: <question> <speaker> said: <reply>"; the speaker as its tag, which
    may be folded), or None."""
    found = re.search(rf" asked: (.+?\?) {re.escape(speaker)} said: (.*)", narrative, re.IGNORECASE | re.DOTALL)
    return (found.group(1), found.group(2)) if found else None


def turn_units(
    *,
    tenant_id: str,
    user_id: str | None,
    conversation_id: str,
    sessions: Sequence[ConversationSession],
    window: int = TURN_WINDOW,
    scope: Scope = Scope.private,
    team_ids: Sequence[str] = (),
    source: Source = Source.user,
    assistants: frozenset[str] = frozenset(),
) -> list[ObservationDraft]:
    """One draft per turn (a burst of one speaker's messages is one turn, `bursts`): the turn with
    its speaker and date, plus `window` turns either side. An assistant's turn (a speaker in
    `assistants`) is low priority: its prose shares many words with any question on its topic,
    while the memory asked for is what the people said. The key names the turn's first message,
    so a burst that grows on re-import updates its unit in place.

    A person's turn right after someone else's turn that ends with a question (`closing_question`)
    says in its narrative what it answers ("Assistant asked: Which car do you drive? User said:
    A grey Ford Focus."): the reply holds the fact but not what it is about. In a chat with an
    assistant the question is beyond the first `NEIGHBOUR_CHARS` characters of the answer that
    the context holds; between people the context holds it, but only for BM25, and the vector
    saw the reply alone (LoCoMo dev: the kNN list alone 0.618 -> 0.658, hybrid recall@10 0.793 ->
    0.801, bench/RESULTS.md part 24). An assistant's own turns say nothing more."""
    drafts: list[ObservationDraft] = []
    for session in sessions:
        turns = bursts(session.turns)
        day = f"{session.started_at.day} {session.started_at:%B %Y}"
        for i, turn in enumerate(turns):
            if not turn.spoken():
                continue
            context: list[str] = []
            for j in range(max(0, i - window), i):
                context.extend(_chunks(f"Before, {turns[j].speaker}: {turns[j].spoken(NEIGHBOUR_CHARS)}"))
            for j in range(i + 1, min(len(turns), i + window + 1)):
                context.extend(_chunks(f"After, {turns[j].speaker}: {turns[j].spoken(NEIGHBOUR_CHARS)}"))
            said = f"{turn.speaker} said: {turn.spoken()}"
            if i and turn.speaker not in assistants and turns[i - 1].speaker != turn.speaker:
                if (question := closing_question(turns[i - 1].spoken())) is not None:
                    said = f"{turns[i - 1].speaker} asked: {question} {said}"
            drafts.append(
                ObservationDraft(
                    tenant_id=tenant_id,
                    user_id=user_id,
                    team_ids=list(team_ids),
                    type=UNIT_TYPE,
                    title=_title(turn),
                    narrative=f"On {day}, {said}"[:20_000],
                    discovery_tokens=context[:100],
                    tags=[turn.speaker[:64]],
                    key=unit_key(conversation_id, first_turn(turn.turn_id)),
                    priority=Priority.low if turn.speaker in assistants else Priority.normal,
                    source=source,
                    verified=False,
                    confidence=1.0,
                    scope=scope,
                    trigger_source=TriggerSource.chat,
                    provenance=Provenance(
                        session_id=session_uuid(conversation_id, session.session_id),
                        source_event_id=provenance_ref(conversation_id, turn.turn_id),
                    ),
                    valid_from=session.started_at,
                )
            )
    return drafts


def derived_units(
    *,
    tenant_id: str,
    user_id: str | None,
    conversation_id: str,
    sessions: Sequence[ConversationSession],
    kinds: frozenset[UnitKind] = DERIVED_KINDS,
    assistants: frozenset[str] = frozenset(),
    scope: Scope = Scope.private,
    team_ids: Sequence[str] = (),
    source: Source = Source.user,
) -> list[ObservationDraft]:
    """The derived units of a conversation (`memory_units`): statements of the people (not of the
    `assistants` speakers), one unit per session and one per name said in several turns; each
    is keyed, dated and owned like the turn units and names its turns in its provenance."""
    by_key = {s.session_id: s for s in sessions}
    speech = [
        Speech(t.turn_id, t.speaker, t.spoken(), s.session_id, f"{s.started_at.day} {s.started_at:%B %Y}")
        for s in sessions
        for t in bursts(s.turns)
    ]
    units: list[DerivedUnit] = []
    if UnitKind.statement in kinds:
        units.extend(statement_units(speech, assistants))
    if UnitKind.session in kinds:
        for session in sessions:
            unit = session_unit([t for t in speech if t.session_key == session.session_id], assistants)
            if unit is not None:
                units.append(unit)
    if UnitKind.entity in kinds:
        units.extend(entity_units(speech, assistants))
    if UnitKind.passage in kinds:
        units.extend(passage_units(speech, assistants))
    drafts = []
    for unit in units:
        session = by_key[unit.session_key]
        # an entity unit joins sessions: it adds to no session's support
        joined = unit.kind is UnitKind.entity
        drafts.append(
            ObservationDraft(
                tenant_id=tenant_id,
                user_id=user_id,
                team_ids=list(team_ids),
                # an assistant's passage is searched only when a question asks the assistant
                type=PASSAGE_TYPE if unit.kind is UnitKind.passage else UNIT_TYPE,
                title=unit.text[:TITLE_MAX],
                tags=[unit.tag[:64]] if unit.tag else [],
                key=derived_key(unit.kind, conversation_id, unit.local),
                # an assistant's passage is low priority, as its answer is (`turn_units`)
                priority=Priority.low if unit.kind is UnitKind.passage else Priority.normal,
                source=source,
                verified=False,
                confidence=1.0,
                scope=scope,
                trigger_source=TriggerSource.chat,
                provenance=Provenance(
                    session_id=None if joined else session_uuid(conversation_id, session.session_id),
                    source_event_id=source_ref(conversation_id, unit.turns),
                ),
                valid_from=session.started_at,
            )
        )
    return drafts


def chat_units(
    *,
    tenant_id: str,
    user_id: str,
    chat_id: uuid.UUID,
    session_id: uuid.UUID,
    started_at: datetime,
    messages: Sequence[tuple[uuid.UUID, str, str]],
    kinds: frozenset[UnitKind] = DERIVED_KINDS,
    reaching: uuid.UUID | None = None,
) -> list[ObservationDraft]:
    """A chat session's messages (id, role, content; in order) as memory units: the user's turns
    (a run of messages is one burst) with their context, the assistant's answers as low-priority
    turn units embedded by their opening, and the user's statements. They are the chat's user's
    (private), dated by the session, keyed by message id (a second run updates them in place)
    and cite their messages: `<chat id>#<message ids>` and the first message as
    `chat_message_id`. Messages of other roles (system, tool) are not memory.

    With `reaching`, a message of the session, only the units that message can have changed:
    those of its turn, of every turn after it and of the `TURN_WINDOW` turns before it (whose
    context reaches it); none when it is not among the messages. A completed chat turn writes
    these at once, so what was said is memory before the session ends; the session's end then
    writes the same units again, unchanged except where later turns were added. Its cost is that
    of the turns reached, not of the session. Only turn, statement and passage units (`kinds`):
    session and entity units span the whole session."""
    turns = [
        Turn(str(message), CHAT_SPEAKERS[role], content)
        for message, role, content in messages
        if role in CHAT_SPEAKERS and content.strip()
    ]
    if not turns:
        return []
    reached: set[str] | None = None
    if reaching is not None:
        if kinds - {UnitKind.statement, UnitKind.passage}:
            raise ValueError("session and entity units span the session: build them without `reaching`")
        merged = bursts(turns)
        at = next((i for i, t in enumerate(merged) if str(reaching) in t.turn_id.split()), None)
        if at is None:
            return []
        reached = {m for t in merged[max(0, at - TURN_WINDOW) :] for m in t.turn_id.split()}
        # the units before the reached ones are not built: the turns from 2 windows back give the
        # reached ones their whole context, and bursts start where they started in the session
        first = merged[max(0, at - 2 * TURN_WINDOW)].turn_id.split()[0]
        turns = turns[next(i for i, t in enumerate(turns) if t.turn_id == first) :]
    sessions = [ConversationSession(str(session_id), started_at, turns)]
    assistants = frozenset({CHAT_SPEAKERS["assistant"]})
    conversation = str(chat_id)
    drafts = turn_units(
        tenant_id=tenant_id, user_id=user_id, conversation_id=conversation, sessions=sessions, assistants=assistants
    ) + derived_units(
        tenant_id=tenant_id,
        user_id=user_id,
        conversation_id=conversation,
        sessions=sessions,
        kinds=kinds,
        assistants=assistants,
    )
    if reached is not None:
        drafts = [d for d in drafts if reached & set((turn_id_of(d.provenance.source_event_id) or "").split())]
    return [_citing_message(d) for d in drafts]


def _citing_message(draft: ObservationDraft) -> ObservationDraft:
    ref = turn_id_of(draft.provenance.source_event_id) or ""
    try:
        first = uuid.UUID(first_turn(ref))
    except ValueError:  # a session unit names no message
        return draft
    return draft.model_copy(update={"provenance": draft.provenance.model_copy(update={"chat_message_id": first})})
