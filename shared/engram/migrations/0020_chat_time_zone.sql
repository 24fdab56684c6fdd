-- The user's time zone as their chat turns name it (`TurnRequest.time_zone`, an IANA name checked
-- by the service): a turn that names another zone than the user's keeps it on its chat, with when
-- (`time_zone_at`), and the zone named last, in any of the user's chats, is the user's where a
-- call names none (their next turns, recall and profile over HTTP, the MCP tools). It is the
-- user's personal data and goes with the chat: exported with it, erased with it.
--
-- Nullable columns without a default: PostgreSQL adds them without rewriting the table.

SET LOCAL lock_timeout = '1min';

ALTER TABLE chats ADD COLUMN IF NOT EXISTS time_zone text;
ALTER TABLE chats ADD COLUMN IF NOT EXISTS time_zone_at timestamptz;

-- the zone the user named last, read at every turn: a partial index of the chats that named one
-- (none yet: building it is one scan of chats, nothing to sort)
CREATE INDEX IF NOT EXISTS chats_user_zone ON chats (tenant_id, user_id, time_zone_at DESC) WHERE time_zone IS NOT NULL;
