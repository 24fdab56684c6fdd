-- Engram foundation: tenant tables with row-level security (R-4, R-4.6).
-- Every tenant table carries tenant_id and a policy on the per-transaction setting
-- engram.tenant_id; the application works as role engram_app, which cannot bypass RLS.

DO $$ BEGIN
  CREATE ROLE engram_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

DO $$ BEGIN
  EXECUTE format('GRANT engram_app TO %I', current_user);
EXCEPTION WHEN others THEN NULL;  -- superusers may SET ROLE anyway
END $$;

CREATE OR REPLACE FUNCTION engram_tenant() RETURNS text
  LANGUAGE sql STABLE AS $$ SELECT nullif(current_setting('engram.tenant_id', true), '') $$;

CREATE TABLE observations (
  id               uuid PRIMARY KEY,
  tenant_id        text NOT NULL,
  user_id          text,
  owner_key        text GENERATED ALWAYS AS (coalesce(user_id, '')) STORED,
  team_ids         text[] NOT NULL DEFAULT '{}',
  type             text NOT NULL,
  title            text NOT NULL,
  narrative        text NOT NULL DEFAULT '',
  facts            text[] NOT NULL DEFAULT '{}',
  concepts         text[] NOT NULL DEFAULT '{}',
  tags             text[] NOT NULL DEFAULT '{}',
  key              text,
  content_hash     text NOT NULL,
  discovery_tokens text[] NOT NULL DEFAULT '{}',
  relevance_count  integer NOT NULL DEFAULT 0,   -- times retrieved (R-7.5)
  cited_count      integer NOT NULL DEFAULT 0,   -- feedback counters kept by record-feedback (R-9)
  confirmed_count  integer NOT NULL DEFAULT 0,
  rejected_count   integer NOT NULL DEFAULT 0,
  priority         text NOT NULL DEFAULT 'normal' CHECK (priority IN ('low', 'normal', 'high', 'critical')),
  source           text NOT NULL CHECK (source IN ('user', 'agent', 'system')),
  verified         boolean NOT NULL DEFAULT false,
  confidence       real NOT NULL DEFAULT 1.0 CHECK (confidence >= 0 AND confidence <= 1),
  scope            text NOT NULL CHECK (scope IN ('private', 'team', 'public', 'sensitive')),
  trigger_source   text NOT NULL CHECK (trigger_source IN ('chat', 'hook', 'manual', 'consolidation')),
  session_id       uuid,
  chat_message_id  uuid,
  source_event_id  text,
  valid_from       timestamptz,
  expires_at       timestamptz,
  superseded_by    uuid REFERENCES observations (id) ON DELETE SET NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT observations_private_has_owner CHECK (scope <> 'private' OR user_id IS NOT NULL)
);
CREATE UNIQUE INDEX observations_content_uq ON observations (tenant_id, owner_key, content_hash);
CREATE UNIQUE INDEX observations_key_uq ON observations (tenant_id, owner_key, type, key) WHERE key IS NOT NULL;
CREATE INDEX observations_tenant_created ON observations (tenant_id, created_at DESC, id);
CREATE INDEX observations_tenant_expiry ON observations (tenant_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX observations_tags ON observations USING gin (tags);

CREATE TABLE observation_feedback (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id      text NOT NULL,
  observation_id uuid REFERENCES observations (id) ON DELETE CASCADE,
  user_id        text,
  kind           text NOT NULL CHECK (kind IN ('retrieved', 'cited', 'confirmed', 'rejected', 'rated')),
  rating         smallint CHECK (rating BETWEEN 1 AND 5),
  query_id       uuid,
  stream_origin  text,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX observation_feedback_obs ON observation_feedback (tenant_id, observation_id, kind);
CREATE INDEX observation_feedback_user ON observation_feedback (tenant_id, user_id, kind);
-- what a user rejected is hidden from that user's recall (R-9.1)
CREATE INDEX observation_feedback_rejected ON observation_feedback (tenant_id, user_id, observation_id)
  WHERE kind = 'rejected';

CREATE TABLE chats (
  id         uuid PRIMARY KEY,
  tenant_id  text NOT NULL,
  user_id    text,
  kind       text NOT NULL CHECK (kind IN ('ai', 'user')),
  title      text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chats_tenant_user ON chats (tenant_id, user_id, updated_at DESC);

CREATE TABLE sessions (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  user_id     text,
  chat_id     uuid REFERENCES chats (id) ON DELETE SET NULL,
  user_prompt text NOT NULL DEFAULT '',
  status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'completed', 'failed')),
  metadata    jsonb NOT NULL DEFAULT '{}',
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_tenant_chat ON sessions (tenant_id, chat_id, status);

CREATE TABLE summaries (
  id                 uuid PRIMARY KEY,
  tenant_id          text NOT NULL,
  session_id         uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  user_id            text,
  request            text NOT NULL DEFAULT '',
  investigated       text NOT NULL DEFAULT '',
  learned            text NOT NULL DEFAULT '',
  completed          text NOT NULL DEFAULT '',
  next_steps         text NOT NULL DEFAULT '',
  notes              text NOT NULL DEFAULT '',
  generated_by_model text NOT NULL DEFAULT '',
  created_at         timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, session_id)
);

CREATE TABLE chat_messages (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL,
  chat_id      uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
  session_id   uuid REFERENCES sessions (id) ON DELETE SET NULL,
  user_id      text,
  role         text NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
  content      text NOT NULL,
  model        text,
  duration_ms  integer,
  memory_trace jsonb NOT NULL DEFAULT '{}',
  usage        jsonb NOT NULL DEFAULT '{}',
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_messages_chat ON chat_messages (tenant_id, chat_id, created_at);

CREATE TABLE ai_events (
  id         bigint GENERATED ALWAYS AS IDENTITY,
  tenant_id  text NOT NULL,
  event_name text NOT NULL,
  user_id    text,
  chat_id    uuid,
  metadata   jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id)
);
CREATE INDEX ai_events_tenant_time ON ai_events (tenant_id, created_at DESC);
CREATE INDEX ai_events_tenant_name_time ON ai_events (tenant_id, event_name, created_at DESC);

CREATE TABLE agent_keys (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  name        text NOT NULL,
  key_hash    text NOT NULL UNIQUE,
  user_id     text,
  teams       text[] NOT NULL DEFAULT '{}',
  permissions text[] NOT NULL DEFAULT '{}',
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);

-- Inbox: which event a consumer has applied, and what it produced (R-5.4 idempotency).
CREATE TABLE processed_events (
  tenant_id    text NOT NULL,
  consumer     text NOT NULL,
  event_key    text NOT NULL,
  produced     uuid[] NOT NULL DEFAULT '{}',
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, consumer, event_key)
);

-- Outbox: events written in the same transaction as the rows they describe; a relay
-- publishes what an interrupted writer could not, so the index never misses a change.
CREATE TABLE outbox (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id  text NOT NULL,
  event_id   text NOT NULL,
  subject    text NOT NULL,
  headers    jsonb NOT NULL,
  body       bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_created ON outbox (created_at);

-- Row-level security on every tenant table.
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['observations', 'observation_feedback', 'chats', 'sessions', 'summaries',
                           'chat_messages', 'ai_events', 'agent_keys', 'processed_events', 'outbox']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = engram_tenant()) '
                   'WITH CHECK (tenant_id = engram_tenant())', t);
  END LOOP;
END $$;

-- Agent keys are looked up by hash before the tenant is known: a narrow definer function.
CREATE OR REPLACE FUNCTION engram_resolve_agent_key(p_hash text)
  RETURNS TABLE (id uuid, tenant_id text, name text, user_id text, teams text[], permissions text[])
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
    SELECT k.id, k.tenant_id, k.name, k.user_id, k.teams, k.permissions
    FROM agent_keys k WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION engram_resolve_agent_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram_resolve_agent_key(text) TO engram_app;
