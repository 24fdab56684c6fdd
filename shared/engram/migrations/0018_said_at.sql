-- When an observation's source said it (issue 21, follow-up): the occurrence time of the event it
-- was derived from (a chat turn's or a business event's CloudEvents `time`), which `created_at`
-- (when a worker wrote it) is not when events arrive late or out of order: a redelivery after a
-- fault, a dead letter replayed days later, an import of history. Consolidation orders two
-- statements of one fact by it, recency is computed from it, and a keyed write never replaces
-- what was said after it (`observation_writes._UPSERT_KEYED`). NULL: said when written (a
-- person's own write, a memory unit dated by its session's `valid_from`).
--
-- A nullable column without a default: PostgreSQL adds it without rewriting the table.

SET LOCAL lock_timeout = '1min';

ALTER TABLE observations ADD COLUMN IF NOT EXISTS said_at timestamptz;
