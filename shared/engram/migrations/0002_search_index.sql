-- Search index on the same PostgreSQL (R-6.2 embedded default, AI_MEMORY_PROVIDER=pgvector):
-- one row per indexed observation with its embedding and the fields recall filters on, a
-- postings table for BM25 (length-normalised term weights, IDF at query time), per-tenant
-- statistics, and an embedding cache keyed by the hash of the embedded text.
-- The index follows PostgreSQL through embed-index; deleting an observation also removes its
-- index rows at once (ON DELETE CASCADE), so the owner's next recall never shows it.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE search_documents (
  observation_id uuid PRIMARY KEY REFERENCES observations (id) ON DELETE CASCADE,
  tenant_id      text NOT NULL,
  user_id        text,
  team_ids       text[] NOT NULL DEFAULT '{}',
  scope          text NOT NULL,
  type           text NOT NULL,
  valid_from     timestamptz,
  expires_at     timestamptz,
  revision       timestamptz NOT NULL,       -- updated_at of the indexed observation
  doc_length     integer NOT NULL,           -- weighted token count (BM25 length normalisation)
  language       text NOT NULL,              -- text search configuration used for the postings
  dims           integer NOT NULL,
  embedding      vector NOT NULL,
  indexed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX search_documents_tenant ON search_documents (tenant_id, type);
-- HNSW per embedding width (an expression index needs a fixed dimension), on half-precision
-- copies (half the memory, the same ranking for unit vectors); the adapter adds one for any
-- other width it is configured with.
CREATE INDEX search_documents_hnsw_64 ON search_documents
  USING hnsw ((embedding::halfvec(64)) halfvec_cosine_ops) WHERE dims = 64;
CREATE INDEX search_documents_hnsw_384 ON search_documents
  USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops) WHERE dims = 384;
CREATE INDEX search_documents_hnsw_512 ON search_documents
  USING hnsw ((embedding::halfvec(512)) halfvec_cosine_ops) WHERE dims = 512;
CREATE INDEX search_documents_hnsw_1024 ON search_documents
  USING hnsw ((embedding::halfvec(1024)) halfvec_cosine_ops) WHERE dims = 1024;

-- Postings: one row per (document, term) with the document side of BM25 precomputed
-- (impact = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))). The visibility fields are
-- copied so the filter runs inside the impact-ordered scan of each term.
CREATE TABLE search_terms (
  tenant_id      text NOT NULL,
  term           text NOT NULL,
  observation_id uuid NOT NULL REFERENCES search_documents (observation_id) ON DELETE CASCADE,
  impact         real NOT NULL,
  user_id        text,
  team_ids       text[] NOT NULL DEFAULT '{}',
  scope          text NOT NULL,
  type           text NOT NULL,
  valid_from     timestamptz,
  expires_at     timestamptz,
  PRIMARY KEY (tenant_id, term, observation_id)
);
CREATE INDEX search_terms_impact ON search_terms (tenant_id, term, impact DESC);
CREATE INDEX search_terms_doc ON search_terms (observation_id);

CREATE TABLE search_stats (
  tenant_id    text PRIMARY KEY,
  doc_count    bigint NOT NULL DEFAULT 0,
  total_length bigint NOT NULL DEFAULT 0
);

CREATE TABLE embedding_cache (
  tenant_id  text NOT NULL,
  model      text NOT NULL,
  text_hash  text NOT NULL,
  embedding  vector NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, model, text_hash)
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['search_documents', 'search_terms', 'search_stats', 'embedding_cache']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = engram_tenant()) '
                   'WITH CHECK (tenant_id = engram_tenant())', t);
  END LOOP;
END $$;

-- Per-tenant document count and total length follow the documents table exactly, also when
-- a cascade from observations removes documents.
CREATE OR REPLACE FUNCTION search_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO search_stats AS s (tenant_id, doc_count, total_length)
  SELECT tenant_id, count(*), coalesce(sum(doc_length), 0) FROM added GROUP BY tenant_id
  ON CONFLICT (tenant_id) DO UPDATE
    SET doc_count = s.doc_count + EXCLUDED.doc_count, total_length = s.total_length + EXCLUDED.total_length;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE search_stats s
     SET doc_count = greatest(0, s.doc_count - r.n), total_length = greatest(0, s.total_length - r.len)
    FROM (SELECT tenant_id, count(*) AS n, coalesce(sum(doc_length), 0) AS len FROM removed GROUP BY tenant_id) r
   WHERE s.tenant_id = r.tenant_id;
  RETURN NULL;
END $$;

CREATE TRIGGER search_documents_added AFTER INSERT ON search_documents
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION search_stats_added();
CREATE TRIGGER search_documents_removed AFTER DELETE ON search_documents
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION search_stats_removed();
