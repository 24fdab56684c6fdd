-- Postings without a primary key (issue 21, the disk and memory per million observations).
--
-- `search_terms` had PRIMARY KEY (tenant_id, term, observation_id), a btree of every posting's
-- key that no statement reads: BM25 reads the covering index (tenant_id, term, impact DESC)
-- (migration 0013), a document's postings are found for its cascade delete through
-- `search_terms_doc` (observation_id), and the document-frequency triggers read the
-- statement's transition tables. It was 22 % of the postings' disk: 1,175 MB of 5,293 MB at
-- 1.1M observations (15 postings per observation; bench/RESULTS.md, ## recall_latency), and
-- one more btree insertion per posting on every write.
--
-- What it enforced still holds without it: a document's postings are written once, in the
-- transaction that inserts the document (one row per stemmed term: `GROUP BY lexeme`), after
-- its old row and with it its old postings are deleted; two writers of the same document take
-- turns on its advisory lock (`PgVectorIndex._upsert`), and `search_documents`' primary key
-- refuses a second entry of one document.
--
-- Dropping the constraint drops its index (no rewrite). It waits at most a minute for its
-- lock; the migration then fails and is run again.

SET LOCAL lock_timeout = '1min';

ALTER TABLE search_terms DROP CONSTRAINT IF EXISTS search_terms_pkey;
