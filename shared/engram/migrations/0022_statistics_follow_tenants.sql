-- The planner's statistics follow a growing tenant sooner (issue 21, follow-up). A tenant that
-- is not in a table's statistics is estimated at one row wherever every other tenant is in the
-- most-common-values list (a database of fewer than about 100 tenants: development, a small
-- deployment); then every index that starts with tenant_id looks free, and reads that should
-- probe a few rows walk the whole tenant: hydration 17.1 ms against 0.23 on a 10,000-row tenant,
-- the memory list page 23.9 against 0.09 (bench/RESULTS.md, part 43). BM25's term lookups and the
-- profile read no longer depend on it. Autovacuum analyzes a table again once a tenth of it has
-- changed (PostgreSQL's default); on the tables recall reads, a hundredth: a new tenant is known
-- to the planner after 1 % of the table instead of 10 %. ANALYZE reads a fixed sample (300 rows per
-- unit of the statistics target, 30,000 by default) whatever the table's size, so a big table pays
-- little for it, and a big table changes by 1 % seldom.

SET LOCAL lock_timeout = '1min';

ALTER TABLE observations SET (autovacuum_analyze_scale_factor = 0.01);
ALTER TABLE search_documents SET (autovacuum_analyze_scale_factor = 0.01);
ALTER TABLE search_terms SET (autovacuum_analyze_scale_factor = 0.01);
ALTER TABLE search_term_stats SET (autovacuum_analyze_scale_factor = 0.01);
