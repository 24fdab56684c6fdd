-- Recall at every tenant size (issue 21): one HNSW graph per large tenant instead of one per
-- embedding width shared by all tenants.
--
-- In a shared graph a tenant that is a small share of it is slow whichever way it is searched:
-- the filtered HNSW scan wades through other tenants' vectors (iterative scan, ~25 ms for a 10k
-- tenant beside a 100k one) and the exact scan grows with the tenant (~90 ms at 100k). A
-- partial index per tenant (`WHERE tenant_id = ... AND dims = ...`) is a graph of that tenant's
-- vectors only: the planner picks it when the query names the tenant (custom plans), and
-- tenants below the exact-scan threshold (ENGRAM_PGVECTOR_EXACT_BELOW, 5,000) have none at all,
-- so their vectors cost no graph memory. The pgvector adapter creates a tenant's graph
-- (CREATE INDEX CONCURRENTLY) when a write takes it over the threshold and scans the tenant
-- exactly until the graph is valid. Here, the tenants already over the default threshold get
-- theirs; the index name is `graph_name()` of engram.adapters.pgvector_index.

DO $$
DECLARE
  shared record;
  big record;
  todo jsonb;
BEGIN
  FOR shared IN SELECT indexname FROM pg_indexes
                WHERE tablename = 'search_documents' AND indexname ~ '^search_documents_hnsw_[0-9]+$'
  LOOP
    EXECUTE format('DROP INDEX IF EXISTS %I', shared.indexname);
  END LOOP;
  -- collected first: CREATE INDEX cannot run while a loop's query still reads the table
  SELECT coalesce(jsonb_agg(jsonb_build_object('tenant_id', tenant_id, 'dims', dims)), '[]') INTO todo
  FROM (SELECT tenant_id, dims FROM search_documents GROUP BY tenant_id, dims HAVING count(*) >= 5000) t;
  FOR big IN SELECT * FROM jsonb_to_recordset(todo) AS x(tenant_id text, dims integer)
  LOOP
    EXECUTE format(
      'CREATE INDEX IF NOT EXISTS %I ON search_documents USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops)'
      ' WHERE tenant_id = %L AND dims = %s',
      'search_documents_hnsw_' || big.dims || '_' || md5(big.tenant_id), big.dims, big.tenant_id, big.dims);
  END LOOP;
END $$;
