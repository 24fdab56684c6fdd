-- A day window over when a memory was said (issue 21, follow-up). A question that names a day
-- ("yesterday", "on 1 May") is also searched within it (`SearchFilter.within`), which held a
-- memory by its valid-from time only: a fact extracted from a chat, a "remember this" click, a
-- person's own note have none (they hold from an unknown time, not from when they were told), so
-- "What did I tell you yesterday?" could not find them in the day. The index now keeps, for a
-- memory without a valid-from time, when it was said (`Observation.said`: its source's time, else
-- when it was written); NULL when it has one. A window holds a memory whose valid_from, or else
-- said_at, falls in it. Only the window reads it: validity ("in force at the search's instant")
-- stays on valid_from, so a memory is never hidden from a search of an earlier instant.
--
-- Documents indexed before this migration have no said_at: `engram reindex` fills it.
--
-- The postings (`search_terms`) do not get the column (the covering index of 0013 would have to
-- be rebuilt to carry it): a window's BM25 list takes the dated memories' postings by their
-- valid_from, as before, and the undated memories said in the window by document, through the
-- partial index below (`pgvector_bm25`). A nullable column without a default is added without
-- rewriting the table; the index is empty when it is built (one scan of search_documents).

SET LOCAL lock_timeout = '1min';

ALTER TABLE search_documents ADD COLUMN IF NOT EXISTS said_at timestamptz;

CREATE INDEX IF NOT EXISTS search_documents_said_at
  ON search_documents (tenant_id, said_at) WHERE said_at IS NOT NULL;
