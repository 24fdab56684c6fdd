-- Telemetry rollups, query indexes and retention support (R-4.5, R-10, R-11).
--
-- The telemetry API answers from hourly rollups so the overview over a million events stays
-- fast: `ai_events` keeps every row (append-only), and statement-level triggers with
-- transition tables fold each INSERT (also COPY) and DELETE (retention, erasure) into four
-- small tables in the same transaction. One trigger run per statement, not per row, so a
-- batch insert or a 5,000-row retention delete costs one aggregate, and the rollups are
-- always exactly the sum of the rows still stored. Every rollup table carries tenant_id
-- and the same row-level security as the rest.

-- per tenant, hour and event name: counts and the sums the overview and time series need
CREATE TABLE ai_events_hourly (
  tenant_id             text NOT NULL,
  bucket                timestamptz NOT NULL,  -- start of the hour (UTC)
  event_name            text NOT NULL,
  events                bigint NOT NULL DEFAULT 0,
  cost_usd              double precision NOT NULL DEFAULT 0,
  input_tokens          bigint NOT NULL DEFAULT 0,
  output_tokens         bigint NOT NULL DEFAULT 0,
  cache_read_tokens     bigint NOT NULL DEFAULT 0,
  cache_creation_tokens bigint NOT NULL DEFAULT 0,
  duration_ms           bigint NOT NULL DEFAULT 0,
  failures              bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, bucket, event_name)
);

-- per tenant, hour and user: what top-users ranks by (cost of chat turns)
CREATE TABLE ai_events_hourly_users (
  tenant_id text NOT NULL,
  bucket    timestamptz NOT NULL,
  user_id   text NOT NULL,
  events    bigint NOT NULL DEFAULT 0,
  turns     bigint NOT NULL DEFAULT 0,
  cost_usd  double precision NOT NULL DEFAULT 0,
  tokens    bigint NOT NULL DEFAULT 0,
  errors    bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, bucket, user_id)
);

-- the same per UTC day: top-users over 30 days reads ~30 rows per user instead of ~720
CREATE TABLE ai_events_daily_users (LIKE ai_events_hourly_users INCLUDING ALL);

-- per tenant, hour and tool: calls, duration and successes of chat.tool_used
CREATE TABLE ai_events_hourly_tools (
  tenant_id   text NOT NULL,
  bucket      timestamptz NOT NULL,
  tool_name   text NOT NULL,
  calls       bigint NOT NULL DEFAULT 0,
  duration_ms bigint NOT NULL DEFAULT 0,
  successes   bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, bucket, tool_name)
);

-- The per-row values a rollup adds up; one definition for the insert and the delete side.
CREATE OR REPLACE FUNCTION engram_ai_event_num(m jsonb, k text) RETURNS double precision
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(m -> k) = 'number' THEN (m ->> k)::double precision ELSE 0 END
$$;

-- Fold the rows of one statement into the rollups: +1 per inserted row, -1 per deleted row.
-- Both triggers name their transition table `delta`, so one function serves both.
CREATE OR REPLACE FUNCTION engram_ai_events_fold() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  sign integer := CASE WHEN TG_OP = 'DELETE' THEN -1 ELSE 1 END;
BEGIN
  -- rows are ordered by key so concurrent writers lock rollup rows in the same order
  INSERT INTO ai_events_hourly AS h (tenant_id, bucket, event_name, events, cost_usd, input_tokens, output_tokens,
                                     cache_read_tokens, cache_creation_tokens, duration_ms, failures)
  SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), event_name,
         sign * count(*),
         sign * sum(engram_ai_event_num(metadata, 'costUsd')),
         sign * sum(engram_ai_event_num(metadata, 'inputTokens'))::bigint,
         sign * sum(engram_ai_event_num(metadata, 'outputTokens'))::bigint,
         sign * sum(engram_ai_event_num(metadata, 'cacheReadInputTokens'))::bigint,
         sign * sum(engram_ai_event_num(metadata, 'cacheCreationInputTokens'))::bigint,
         sign * sum(engram_ai_event_num(metadata, 'durationMs'))::bigint,
         sign * count(*) FILTER (WHERE metadata -> 'success' = 'false'::jsonb
                                   OR metadata -> 'succeeded' = 'false'::jsonb
                                   OR metadata ->> 'status' = 'failed')
  FROM delta
  GROUP BY 1, 2, 3
  ORDER BY 1, 2, 3
  ON CONFLICT (tenant_id, bucket, event_name) DO UPDATE SET
    events = h.events + EXCLUDED.events,
    cost_usd = h.cost_usd + EXCLUDED.cost_usd,
    input_tokens = h.input_tokens + EXCLUDED.input_tokens,
    output_tokens = h.output_tokens + EXCLUDED.output_tokens,
    cache_read_tokens = h.cache_read_tokens + EXCLUDED.cache_read_tokens,
    cache_creation_tokens = h.cache_creation_tokens + EXCLUDED.cache_creation_tokens,
    duration_ms = h.duration_ms + EXCLUDED.duration_ms,
    failures = h.failures + EXCLUDED.failures;

  INSERT INTO ai_events_hourly_users AS u (tenant_id, bucket, user_id, events, turns, cost_usd, tokens, errors)
  SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), user_id,
         sign * count(*),
         sign * count(*) FILTER (WHERE event_name = 'chat.turn_completed'),
         sign * sum(engram_ai_event_num(metadata, 'costUsd')),
         sign * sum(engram_ai_event_num(metadata, 'inputTokens')
                    + engram_ai_event_num(metadata, 'outputTokens'))::bigint,
         sign * count(*) FILTER (WHERE event_name = 'chat.error')
  FROM delta
  WHERE user_id IS NOT NULL
  GROUP BY 1, 2, 3
  ORDER BY 1, 2, 3
  ON CONFLICT (tenant_id, bucket, user_id) DO UPDATE SET
    events = u.events + EXCLUDED.events,
    turns = u.turns + EXCLUDED.turns,
    cost_usd = u.cost_usd + EXCLUDED.cost_usd,
    tokens = u.tokens + EXCLUDED.tokens,
    errors = u.errors + EXCLUDED.errors;

  INSERT INTO ai_events_daily_users AS u (tenant_id, bucket, user_id, events, turns, cost_usd, tokens, errors)
  SELECT tenant_id, date_trunc('day', created_at, 'UTC'), user_id,
         sign * count(*),
         sign * count(*) FILTER (WHERE event_name = 'chat.turn_completed'),
         sign * sum(engram_ai_event_num(metadata, 'costUsd')),
         sign * sum(engram_ai_event_num(metadata, 'inputTokens')
                    + engram_ai_event_num(metadata, 'outputTokens'))::bigint,
         sign * count(*) FILTER (WHERE event_name = 'chat.error')
  FROM delta
  WHERE user_id IS NOT NULL
  GROUP BY 1, 2, 3
  ORDER BY 1, 2, 3
  ON CONFLICT (tenant_id, bucket, user_id) DO UPDATE SET
    events = u.events + EXCLUDED.events,
    turns = u.turns + EXCLUDED.turns,
    cost_usd = u.cost_usd + EXCLUDED.cost_usd,
    tokens = u.tokens + EXCLUDED.tokens,
    errors = u.errors + EXCLUDED.errors;

  INSERT INTO ai_events_hourly_tools AS t (tenant_id, bucket, tool_name, calls, duration_ms, successes)
  SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), metadata ->> 'toolName',
         sign * count(*),
         sign * sum(engram_ai_event_num(metadata, 'durationMs'))::bigint,
         sign * count(*) FILTER (WHERE metadata -> 'success' = 'true'::jsonb)
  FROM delta
  WHERE event_name = 'chat.tool_used' AND metadata ? 'toolName'
  GROUP BY 1, 2, 3
  ORDER BY 1, 2, 3
  ON CONFLICT (tenant_id, bucket, tool_name) DO UPDATE SET
    calls = t.calls + EXCLUDED.calls,
    duration_ms = t.duration_ms + EXCLUDED.duration_ms,
    successes = t.successes + EXCLUDED.successes;

  IF sign < 0 THEN  -- buckets that no longer hold any event disappear
    DELETE FROM ai_events_hourly r
      USING (SELECT DISTINCT tenant_id, date_trunc('hour', created_at, 'UTC') AS bucket FROM delta) d
      WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.events <= 0;
    DELETE FROM ai_events_hourly_users r
      USING (SELECT DISTINCT tenant_id, date_trunc('hour', created_at, 'UTC') AS bucket FROM delta) d
      WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.events <= 0;
    DELETE FROM ai_events_daily_users r
      USING (SELECT DISTINCT tenant_id, date_trunc('day', created_at, 'UTC') AS bucket FROM delta) d
      WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.events <= 0;
    DELETE FROM ai_events_hourly_tools r
      USING (SELECT DISTINCT tenant_id, date_trunc('hour', created_at, 'UTC') AS bucket FROM delta) d
      WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.calls <= 0;
  END IF;
  RETURN NULL;
END $$;

-- Rows already stored when this migration runs are folded in once.
INSERT INTO ai_events_hourly (tenant_id, bucket, event_name, events, cost_usd, input_tokens, output_tokens,
                              cache_read_tokens, cache_creation_tokens, duration_ms, failures)
SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), event_name, count(*),
       sum(engram_ai_event_num(metadata, 'costUsd')),
       sum(engram_ai_event_num(metadata, 'inputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'outputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'cacheReadInputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'cacheCreationInputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'durationMs'))::bigint,
       count(*) FILTER (WHERE metadata -> 'success' = 'false'::jsonb OR metadata -> 'succeeded' = 'false'::jsonb
                          OR metadata ->> 'status' = 'failed')
FROM ai_events GROUP BY 1, 2, 3;
INSERT INTO ai_events_hourly_users (tenant_id, bucket, user_id, events, turns, cost_usd, tokens, errors)
SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), user_id, count(*),
       count(*) FILTER (WHERE event_name = 'chat.turn_completed'),
       sum(engram_ai_event_num(metadata, 'costUsd')),
       sum(engram_ai_event_num(metadata, 'inputTokens') + engram_ai_event_num(metadata, 'outputTokens'))::bigint,
       count(*) FILTER (WHERE event_name = 'chat.error')
FROM ai_events WHERE user_id IS NOT NULL GROUP BY 1, 2, 3;
INSERT INTO ai_events_daily_users (tenant_id, bucket, user_id, events, turns, cost_usd, tokens, errors)
SELECT tenant_id, date_trunc('day', bucket, 'UTC'), user_id, sum(events), sum(turns), sum(cost_usd), sum(tokens),
       sum(errors)
FROM ai_events_hourly_users GROUP BY 1, 2, 3;
INSERT INTO ai_events_hourly_tools (tenant_id, bucket, tool_name, calls, duration_ms, successes)
SELECT tenant_id, date_trunc('hour', created_at, 'UTC'), metadata ->> 'toolName', count(*),
       sum(engram_ai_event_num(metadata, 'durationMs'))::bigint,
       count(*) FILTER (WHERE metadata -> 'success' = 'true'::jsonb)
FROM ai_events WHERE event_name = 'chat.tool_used' AND metadata ? 'toolName' GROUP BY 1, 2, 3;

CREATE TRIGGER ai_events_rollup_insert AFTER INSERT ON ai_events
  REFERENCING NEW TABLE AS delta FOR EACH STATEMENT EXECUTE FUNCTION engram_ai_events_fold();
CREATE TRIGGER ai_events_rollup_delete AFTER DELETE ON ai_events
  REFERENCING OLD TABLE AS delta FOR EACH STATEMENT EXECUTE FUNCTION engram_ai_events_fold();

-- ai_events is append-only (R-4.5): rows are written once and only ever deleted.
CREATE OR REPLACE FUNCTION engram_ai_events_append_only() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ai_events is append-only: rows cannot be updated'
    USING ERRCODE = 'feature_not_supported';
END $$;
CREATE TRIGGER ai_events_no_update BEFORE UPDATE ON ai_events
  FOR EACH STATEMENT EXECUTE FUNCTION engram_ai_events_append_only();

-- /events filters by user or chat within a tenant, newest first (R-10)
CREATE INDEX ai_events_tenant_user_time ON ai_events (tenant_id, user_id, created_at DESC) WHERE user_id IS NOT NULL;
CREATE INDEX ai_events_tenant_chat_time ON ai_events (tenant_id, chat_id, created_at DESC) WHERE chat_id IS NOT NULL;
-- retention finds old rows of every tenant by time; the table is appended in time order,
-- so a block-range index is tiny and enough
CREATE INDEX ai_events_created_brin ON ai_events USING brin (created_at);

-- Row-level security on the rollups, like every other tenant table.
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['ai_events_hourly', 'ai_events_hourly_users', 'ai_events_daily_users', 'ai_events_hourly_tools']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = engram_tenant()) '
                   'WITH CHECK (tenant_id = engram_tenant())', t);
  END LOOP;
END $$;

-- Feedback (R-9): ratings are looked up per query and stream.
CREATE INDEX observation_feedback_query ON observation_feedback (tenant_id, query_id, stream_origin)
  WHERE query_id IS NOT NULL;

-- Erasure (R-11.3): when a user's personal memory was erased. Feedback the user gave before
-- that moment but which was still in flight is dropped by record-feedback, so an erasure
-- stays complete; feedback given afterwards is recorded as usual.
CREATE TABLE personal_data_erasures (
  tenant_id text NOT NULL,
  user_id   text NOT NULL,
  erased_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, user_id)
);
ALTER TABLE personal_data_erasures ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON personal_data_erasures;
CREATE POLICY tenant_isolation ON personal_data_erasures USING (tenant_id = engram_tenant())
  WITH CHECK (tenant_id = engram_tenant());
