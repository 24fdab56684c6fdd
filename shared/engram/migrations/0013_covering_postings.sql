-- BM25 from the index alone (issue 21, recall latency at 100k-1M observations per tenant).
--
-- Each query term reads its best postings through an impact-ordered index and filters them by
-- visibility (scope, user, teams, validity, type, hidden ids). With the index on
-- (tenant_id, term, impact DESC) alone every one of those postings, ~300 per term in a large
-- tenant, was fetched from the table for the filter: one random heap page each, ~7 ms per
-- term on a 1M tenant. This index carries the filter's columns (INCLUDE), so the scan is an
-- index-only scan: a term's postings are a few consecutive index pages. Its key is the old
-- index's key, so the postings come in the same order and BM25's results do not change.
--
-- An index-only scan skips the table only for pages the visibility map marks all-visible;
-- postings are insert-mostly, so autovacuum on search_terms is made to run after 1 % of new
-- rows (the default, 20 %, leaves a large tenant's newest postings on the heap for long).

CREATE INDEX IF NOT EXISTS search_terms_impact_covering ON search_terms (tenant_id, term, impact DESC)
  INCLUDE (observation_id, type, scope, user_id, team_ids, valid_from, expires_at);
DROP INDEX IF EXISTS search_terms_impact;
ALTER TABLE search_terms SET (autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_scale_factor = 0.02);
