-- A small tenant's graph read at once before its first search (issue 21, idle tenants of a
-- database larger than memory).
--
-- pgvector's HNSW search follows the graph one neighbour list at a time, and on cold pages
-- each is one synchronous 8 kB read: a tenant of 5k-10k observations has a graph of ~1,000
-- pages and its first search read most of them one by one (52 ms median, bench/RESULTS.md,
-- ## recall_latency). pg_prewarm's 'buffer' mode reads a relation through PostgreSQL 18's
-- read stream, many combined reads in flight: the same graph comes into shared_buffers in
-- ~18 ms, and the search then walks it in memory. When the pages are already in
-- shared_buffers the call costs ~0.4 ms per 1,000 pages (the adapter calls it once per
-- tenant every few minutes, and only for graphs up to ENGRAM_PGVECTOR_WARM_BLOCKS pages).
--
-- A definer function: pg_prewarm needs SELECT on the relation, and an index's privileges are
-- its table owner's. It warms only the graph of the transaction's own tenant
-- (`engram_tenant()`), never fails the search that calls it (a graph dropped meanwhile is
-- searched as it would have been), and returns 0 where pg_prewarm is not installed.

DO $$
BEGIN
  CREATE EXTENSION IF NOT EXISTS pg_prewarm;
EXCEPTION WHEN others THEN
  RAISE NOTICE 'pg_prewarm is not available, tenant graphs are not warmed: %', SQLERRM;
END $$;

CREATE OR REPLACE FUNCTION engram_warm_graph(p_dims integer, p_max_blocks integer) RETURNS bigint
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog AS $$
DECLARE
  graph regclass;
BEGIN
  IF engram_tenant() IS NULL OR to_regprocedure('pg_prewarm(regclass, text, text, bigint, bigint)') IS NULL THEN
    RETURN 0;
  END IF;
  graph := to_regclass(format('search_documents_hnsw_%s_%s', p_dims, md5(engram_tenant())));
  IF graph IS NULL OR pg_relation_size(graph) > p_max_blocks::bigint * current_setting('block_size')::bigint THEN
    RETURN 0;
  END IF;
  RETURN pg_prewarm(graph, 'buffer');
EXCEPTION WHEN others THEN
  RETURN 0;
END $$;
REVOKE ALL ON FUNCTION engram_warm_graph(integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram_warm_graph(integer, integer) TO engram_app;
