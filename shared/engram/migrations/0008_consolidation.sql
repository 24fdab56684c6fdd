-- Consolidation (R-15): merge duplicates, supersede outdated observations, link conflicts,
-- digest old low-priority ones. Nothing is deleted: a superseded observation keeps its row,
-- gets `superseded_by` and `valid_to`, and leaves default recall (and the index).
--
-- - `valid_to`: when the observation stopped being current (set by consolidation; never in the
--   future). Recall "as of" a time uses [created_at / valid_from, valid_to).
-- - `merged_from`: provenance of a consolidated observation or digest (every source).
-- - `conflicts_with`: live observations that contradict this one without a clear order; recall
--   marks them "(conflicting: ...)". A trigger removes a deleted observation from its partners.
-- - `consolidations`: one row per decision that changed something: who (the consolidation
--   function or a person), when, why, which path (rules or llm, the model), and whether a
--   person undid it (then the same observations are never consolidated together again).
--   `anchor_id` is the observation the decision is about (the consolidated or newer one): when
--   it is deleted (erasure), the record and the text in its reason go with it.

ALTER TABLE observations ADD COLUMN IF NOT EXISTS valid_to timestamptz;
ALTER TABLE observations ADD COLUMN IF NOT EXISTS merged_from uuid[] NOT NULL DEFAULT '{}';
ALTER TABLE observations ADD COLUMN IF NOT EXISTS conflicts_with uuid[] NOT NULL DEFAULT '{}';

-- the chain of versions: what an observation superseded (history, recall as of a time)
CREATE INDEX IF NOT EXISTS observations_superseded_by ON observations (superseded_by)
  WHERE superseded_by IS NOT NULL;
-- the consolidation function's candidates: one audience (owner, scope) and type, current first
CREATE INDEX IF NOT EXISTS observations_audience ON observations (tenant_id, owner_key, scope, type, created_at DESC)
  WHERE superseded_by IS NULL AND valid_to IS NULL;

CREATE TABLE IF NOT EXISTS consolidations (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  decision    text NOT NULL CHECK (decision IN ('duplicate', 'update', 'conflict', 'digest')),
  anchor_id   uuid NOT NULL REFERENCES observations (id) ON DELETE CASCADE,
  result_id   uuid REFERENCES observations (id) ON DELETE CASCADE,  -- what became current (NULL: conflict)
  source_ids  uuid[] NOT NULL,                                      -- what it superseded (or linked)
  members     uuid[] NOT NULL,                                      -- result and sources
  reason      text NOT NULL,
  path        text NOT NULL CHECK (path IN ('rules', 'llm')),
  model       text,
  actor       text NOT NULL,                                        -- 'consolidate-memory', 'sweep'
  created_at  timestamptz NOT NULL DEFAULT now(),
  undone_at   timestamptz,
  undone_by   text                                                  -- the person who undid it
);
CREATE INDEX IF NOT EXISTS consolidations_members ON consolidations USING gin (members);
CREATE INDEX IF NOT EXISTS consolidations_tenant_time ON consolidations (tenant_id, created_at DESC);

ALTER TABLE consolidations ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON consolidations;
CREATE POLICY tenant_isolation ON consolidations USING (tenant_id = engram_tenant())
  WITH CHECK (tenant_id = engram_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON consolidations TO engram_app;

-- a deleted observation leaves no dangling conflict links (the index would not see them either)
CREATE OR REPLACE FUNCTION observations_unlink_conflicts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE observations SET conflicts_with = array_remove(conflicts_with, OLD.id)
  WHERE id = ANY(OLD.conflicts_with);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS observations_unlink_conflicts ON observations;
CREATE TRIGGER observations_unlink_conflicts AFTER DELETE ON observations
  FOR EACH ROW WHEN (cardinality(OLD.conflicts_with) > 0) EXECUTE FUNCTION observations_unlink_conflicts();
