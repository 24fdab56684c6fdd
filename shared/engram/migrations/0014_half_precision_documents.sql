-- Half-precision vectors in search_documents (issue 21, small tenants as fast as big ones).
--
-- A tenant below the exact-scan threshold is searched by reading all its rows, and on cold
-- pages that is one 8 kB page per 4 rows: a 384-dim single-precision vector is 1,544 bytes
-- of a row. As halfvec it is 776 bytes and a page holds 8 rows, so a cold exact scan reads
-- half the pages and the table is half as large (1,953 -> 975 MB per million observations,
-- bench/RESULTS.md). The ranking is the tenants' graphs' own: they have always indexed
-- half-precision copies (`embedding::halfvec(N)`), so exact and graph scans now compute the
-- same distances. Unit vectors lose nothing recall can see (float16 keeps ~3 significant
-- digits; the adapter refuses components beyond float16's range, +-65,504).
--
-- ALTER COLUMN TYPE rewrites the table and rebuilds its indexes, the tenants' graphs
-- included (their expression `embedding::halfvec(N)` is re-parsed against the new type), in
-- this migration's transaction, under an exclusive lock: searches wait for it (38 s for
-- 178,490 rows and 17 graphs on 2 cores). Skipped where the column already is halfvec. It
-- waits at most a minute for its lock (a long transaction would otherwise queue every search
-- behind it); the migration then fails and is run again. The previous release's statements
-- keep working on the new column (PostgreSQL casts their single-precision query to halfvec).

SET LOCAL lock_timeout = '1min';

DO $$
BEGIN
  IF (SELECT format_type(atttypid, atttypmod) FROM pg_attribute
      WHERE attrelid = 'search_documents'::regclass AND attname = 'embedding') = 'vector' THEN
    ALTER TABLE search_documents ALTER COLUMN embedding TYPE halfvec USING embedding::halfvec;
  END IF;
END $$;
