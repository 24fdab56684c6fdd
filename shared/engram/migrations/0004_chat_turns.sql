-- chat-turn (R-4.3, R-4.4, R-8.3): what an assistant message sends back on the next turn.
-- `content_blocks` holds the sanitised Anthropic content of an assistant message (a
-- server-side compaction block and the answer text), so a compacted conversation continues
-- from its summary instead of resending everything before it.
ALTER TABLE chat_messages ADD COLUMN IF NOT EXISTS content_blocks jsonb;

-- the active session of a chat is looked up on every turn
CREATE INDEX IF NOT EXISTS sessions_tenant_chat_active ON sessions (tenant_id, chat_id, updated_at DESC)
  WHERE status = 'active';

-- the stable memory block of every turn reads the user's own preferences and identity
CREATE INDEX IF NOT EXISTS observations_owner_type ON observations (tenant_id, user_id, type)
  WHERE user_id IS NOT NULL;
