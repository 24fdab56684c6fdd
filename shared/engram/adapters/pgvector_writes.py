"""The pgvector index's writes as SQL: a batch of documents with their BM25 length, and their
postings with the document side of BM25 precomputed (`impact`, see `pgvector_index`). The
adapter runs them per batch; `bench.latency_corpus` runs the postings statement on its bulk
loads, so a benchmark corpus is indexed exactly as the adapter indexes."""

from __future__ import annotations

from engram.domain.ranking import BM25_B, BM25_K1

BODY_WEIGHT = 0.5  # narrative and discovery tokens count half of headline ones

INSERT_DOCUMENTS = f"""
INSERT INTO search_documents (observation_id, tenant_id, user_id, team_ids, scope, type, valid_from, expires_at,
                              said_at, revision, doc_length, language, dims, embedding)
SELECT d.id, $1, d.user_id, ARRAY(SELECT jsonb_array_elements_text(d.team_ids)), d.scope, d.type,
       d.valid_from, d.expires_at, d.said_at, d.revision,
       round(coalesce((SELECT sum(cardinality(t.positions))
                       FROM unnest(to_tsvector(d.language::regconfig, d.title)) t), 0)
           + {BODY_WEIGHT} * coalesce((SELECT sum(cardinality(t.positions))
                                       FROM unnest(to_tsvector(d.language::regconfig, d.body)) t), 0))::integer,
       d.language, d.dims, d.embedding::halfvec
FROM jsonb_to_recordset($2::jsonb) AS d(id uuid, user_id text, team_ids jsonb, scope text, type text,
     valid_from timestamptz, expires_at timestamptz, said_at timestamptz, revision timestamptz, language text,
     title text, body text, dims integer, embedding text)
"""

INSERT_POSTINGS = f"""
WITH d AS (
  SELECT x.id, x.title, x.body, s.user_id, s.team_ids, s.scope, s.type, s.valid_from, s.expires_at,
         s.doc_length, s.language
  FROM unnest($2::uuid[], $3::text[], $4::text[]) AS x(id, title, body)
  JOIN search_documents s ON s.observation_id = x.id
), stats AS (
  SELECT greatest(1.0, total_length::float8 / greatest(bm25_docs, 1)) AS avgdl FROM search_stats WHERE tenant_id = $1
)
INSERT INTO search_terms (tenant_id, term, observation_id, impact,
                          user_id, team_ids, scope, type, valid_from, expires_at)
SELECT $1, l.lexeme, d.id,
       (l.tf * ({BM25_K1} + 1)
        / (l.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * d.doc_length / (SELECT avgdl FROM stats))))::real,
       d.user_id, d.team_ids, d.scope, d.type, d.valid_from, d.expires_at
FROM d CROSS JOIN LATERAL (
  SELECT w.lexeme, sum(w.n) AS tf FROM (
    SELECT t.lexeme, cardinality(t.positions)::float8 AS n FROM unnest(to_tsvector(d.language::regconfig, d.title)) t
    UNION ALL
    SELECT t.lexeme, {BODY_WEIGHT} * cardinality(t.positions) FROM unnest(to_tsvector(d.language::regconfig, d.body)) t
  ) w GROUP BY w.lexeme
) l
"""
