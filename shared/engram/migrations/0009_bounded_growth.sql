-- Bounded growth (issue 16, R-16.2): the inbox and the embedding cache are pruned by the workers.
-- The inbox is pruned by age per consumer; the embedding cache by last use (refreshed at most
-- once a day per entry when a batch finds it), so an entry in use is never pruned.
CREATE INDEX IF NOT EXISTS processed_events_age ON processed_events (consumer, processed_at);

ALTER TABLE embedding_cache ADD COLUMN IF NOT EXISTS used_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS embedding_cache_used ON embedding_cache (used_at);
