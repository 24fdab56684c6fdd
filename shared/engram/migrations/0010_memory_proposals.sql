-- Memory proposals (issue 20): what chat extraction found worth keeping but may not store on its
-- own (sensitive, team-wide or low-confidence) waits here for the chat's user to approve or reject
-- it; undecided ones expire. The draft is the observation as it would be written. A chat's
-- proposals go with the chat (a user's erasure deletes their chats).
CREATE TABLE IF NOT EXISTS memory_proposals (
  id             uuid PRIMARY KEY,
  tenant_id      text NOT NULL,
  chat_id        uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
  user_id        text NOT NULL,
  message_id     uuid,                                   -- the assistant message of the turn
  reason         text NOT NULL CHECK (reason IN ('sensitive', 'team', 'low_confidence')),
  draft          jsonb NOT NULL,
  status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
  observation_id uuid REFERENCES observations (id) ON DELETE SET NULL,  -- what approving stored
  created_at     timestamptz NOT NULL DEFAULT now(),
  expires_at     timestamptz NOT NULL,
  decided_at     timestamptz,
  decided_by     text
);
CREATE INDEX IF NOT EXISTS memory_proposals_chat ON memory_proposals (tenant_id, chat_id, status, created_at);
CREATE INDEX IF NOT EXISTS memory_proposals_pending ON memory_proposals (expires_at) WHERE status = 'pending';

ALTER TABLE memory_proposals ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON memory_proposals;
CREATE POLICY tenant_isolation ON memory_proposals USING (tenant_id = engram_tenant())
  WITH CHECK (tenant_id = engram_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON memory_proposals TO engram_app;
