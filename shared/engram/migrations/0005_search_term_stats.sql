-- BM25 document frequencies per tenant and term, kept exact by statement-level triggers on the
-- postings (R-6.2, recall latency). Before this table, every lexical query counted each query
-- term's postings (an index-only scan per term: ~3-4 ms per query at 100k documents).
--
-- Lock order: each trigger first locks the tenant's `search_stats` row, then term rows in term
-- order, so concurrent writers of one tenant (embed-index workers, deletes cascading from
-- observations) queue instead of deadlocking.

CREATE TABLE search_term_stats (
  tenant_id text NOT NULL,
  term      text NOT NULL,
  doc_freq  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, term)
);

ALTER TABLE search_term_stats ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON search_term_stats;
CREATE POLICY tenant_isolation ON search_term_stats USING (tenant_id = engram_tenant())
  WITH CHECK (tenant_id = engram_tenant());

INSERT INTO search_term_stats (tenant_id, term, doc_freq)
SELECT tenant_id, term, count(*) FROM search_terms GROUP BY tenant_id, term;

CREATE OR REPLACE FUNCTION search_term_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM search_stats s WHERE s.tenant_id IN (SELECT DISTINCT tenant_id FROM added)
    ORDER BY s.tenant_id FOR UPDATE;
  INSERT INTO search_term_stats AS s (tenant_id, term, doc_freq)
  SELECT tenant_id, term, count(*) FROM added GROUP BY tenant_id, term ORDER BY tenant_id, term
  ON CONFLICT (tenant_id, term) DO UPDATE SET doc_freq = s.doc_freq + EXCLUDED.doc_freq;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_term_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM search_stats s WHERE s.tenant_id IN (SELECT DISTINCT tenant_id FROM removed)
    ORDER BY s.tenant_id FOR UPDATE;
  PERFORM 1 FROM search_term_stats s
    WHERE (s.tenant_id, s.term) IN (SELECT DISTINCT tenant_id, term FROM removed)
    ORDER BY s.tenant_id, s.term FOR UPDATE;
  UPDATE search_term_stats s SET doc_freq = greatest(0, s.doc_freq - r.n)
    FROM (SELECT tenant_id, term, count(*) AS n FROM removed GROUP BY tenant_id, term) r
   WHERE s.tenant_id = r.tenant_id AND s.term = r.term;
  RETURN NULL;
END $$;

CREATE TRIGGER search_terms_added AFTER INSERT ON search_terms
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION search_term_stats_added();
CREATE TRIGGER search_terms_removed AFTER DELETE ON search_terms
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION search_term_stats_removed();
