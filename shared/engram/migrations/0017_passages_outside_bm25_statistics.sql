-- An assistant's passages keep their postings but leave BM25's statistics (issue 21, part 19).
--
-- A passage (`memory_units.passage_units`, observation type 'passage' =
-- `memory_units.PASSAGE_TYPE`) is a few sentences of an assistant's answer, whose whole text is
-- also the answer's turn unit. Counted in the tenant's statistics, every word of an answer
-- counted twice or more: document frequencies, the document count (2.8x with passages in a
-- user-assistant chat) and the average length all moved, and every BM25 search reads them,
-- also the searches that leave the passages out (`addressee.unasked_types`: a question about
-- the user's own facts). Now the statistics count the other documents only: a search without
-- the passages ranks exactly as if there were none, and a search of the passages weighs their
-- words as the tenant's other memories do (each answer's words once, through its turn unit).
--
-- `search_stats.doc_count` stays the count of every document: it is the vector search's size
-- (exact scan or graph, `PgVectorIndex.prepare`). `bm25_docs` is BM25's N, and
-- `total_length` its documents' length (the average length the postings' impact is computed
-- with, `pgvector_writes.INSERT_POSTINGS`).

SET LOCAL lock_timeout = '1min';

-- Writers wait from here to the commit (searches read on): a writer's statistics triggers then
-- run with the new definitions, and one already under way finishes first, so the counts below
-- include it. ADD COLUMN holds search_stats exclusively (searches wait for the few statements).
LOCK TABLE search_documents, search_terms IN SHARE MODE;

ALTER TABLE search_stats ADD COLUMN IF NOT EXISTS bm25_docs bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION search_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO search_stats AS s (tenant_id, doc_count, bm25_docs, total_length)
  SELECT tenant_id, count(*), count(*) FILTER (WHERE type <> 'passage'),
         coalesce(sum(doc_length) FILTER (WHERE type <> 'passage'), 0)
    FROM added GROUP BY tenant_id
  ON CONFLICT (tenant_id) DO UPDATE
    SET doc_count = s.doc_count + EXCLUDED.doc_count, bm25_docs = s.bm25_docs + EXCLUDED.bm25_docs,
        total_length = s.total_length + EXCLUDED.total_length;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE search_stats s
     SET doc_count = greatest(0, s.doc_count - r.n), bm25_docs = greatest(0, s.bm25_docs - r.counted),
         total_length = greatest(0, s.total_length - r.len)
    FROM (SELECT tenant_id, count(*) AS n, count(*) FILTER (WHERE type <> 'passage') AS counted,
                 coalesce(sum(doc_length) FILTER (WHERE type <> 'passage'), 0) AS len
            FROM removed GROUP BY tenant_id) r
   WHERE s.tenant_id = r.tenant_id;
  RETURN NULL;
END $$;

-- the lock order of 0005: the tenant's `search_stats` row first, then term rows in term order
CREATE OR REPLACE FUNCTION search_term_stats_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM search_stats s WHERE s.tenant_id IN (SELECT DISTINCT tenant_id FROM added)
    ORDER BY s.tenant_id FOR UPDATE;
  INSERT INTO search_term_stats AS s (tenant_id, term, doc_freq)
  SELECT tenant_id, term, count(*) FROM added WHERE type <> 'passage'
   GROUP BY tenant_id, term ORDER BY tenant_id, term
  ON CONFLICT (tenant_id, term) DO UPDATE SET doc_freq = s.doc_freq + EXCLUDED.doc_freq;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_term_stats_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM search_stats s WHERE s.tenant_id IN (SELECT DISTINCT tenant_id FROM removed)
    ORDER BY s.tenant_id FOR UPDATE;
  PERFORM 1 FROM search_term_stats s
    WHERE (s.tenant_id, s.term) IN (SELECT DISTINCT tenant_id, term FROM removed WHERE type <> 'passage')
    ORDER BY s.tenant_id, s.term FOR UPDATE;
  UPDATE search_term_stats s SET doc_freq = greatest(0, s.doc_freq - r.n)
    FROM (SELECT tenant_id, term, count(*) AS n FROM removed WHERE type <> 'passage' GROUP BY tenant_id, term) r
   WHERE s.tenant_id = r.tenant_id AND s.term = r.term;
  RETURN NULL;
END $$;

-- What is stored already: the passages' postings out of the document frequencies, their count
-- and length out of BM25's N and length. The passages are found through search_documents'
-- (tenant_id, type) index and their postings through search_terms_doc, so the work is in
-- proportion to the passages, not to the postings.
UPDATE search_term_stats s SET doc_freq = greatest(0, s.doc_freq - p.n)
  FROM (SELECT t.tenant_id, t.term, count(*) AS n
          FROM search_documents d JOIN search_terms t ON t.observation_id = d.observation_id
         WHERE d.type = 'passage' GROUP BY t.tenant_id, t.term) p
 WHERE s.tenant_id = p.tenant_id AND s.term = p.term;

UPDATE search_stats SET bm25_docs = doc_count;

UPDATE search_stats s
   SET bm25_docs = greatest(0, s.bm25_docs - p.n), total_length = greatest(0, s.total_length - p.len)
  FROM (SELECT tenant_id, count(*) AS n, coalesce(sum(doc_length), 0) AS len
          FROM search_documents WHERE type = 'passage' GROUP BY tenant_id) p
 WHERE s.tenant_id = p.tenant_id;
