"""The pgvector index's BM25 statement (`PgVectorIndex.lexical_in`).

A document scores the sum over the query's terms of idf (from `search_term_stats`, exact
document frequencies) times the posting's stored impact (the document side of BM25,
`pgvector_writes`); the query's weight (`ranking.lexical_weight`) comes beside it. Each query
term reads its best postings through the covering (tenant, term, impact) index with the search's
filter in that scan (migration 0013): all of them below `exact_below` documents, at most
`postings_per_term` above.

A search within a window (`SearchFilter.within`) keeps the postings whose valid_from falls in it
(the covering index carries valid_from), and adds the memories without a valid-from time said in
it (migration 0021: `search_documents.said_at`, which the postings do not carry): those are read
by document, through the partial index on said_at, and their postings of the query's terms. They
are few (what was told on a day), and the scores are those of the whole search.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engram.adapters.observation_rows import search_filter_sql, visibility_sql
from engram.domain.ranking import query_words
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter, SearchPlan

SEARCH_CONFIGS = ("english", "german")
BM25_IDF_SQL = "ln(1 + ((SELECT docs FROM n) - {df} + 0.5) / ({df}::float8 + 0.5))"  # `ranking.bm25_idf`


def lexical_statement(
    visibility: Visibility,
    text: str,
    where: SearchFilter,
    limit: int,
    *,
    exact_below: int,
    postings_per_term: int,
    plan: SearchPlan | None,
) -> tuple[str, list[Any]]:
    """The BM25 statement of one search and its parameters: rows of id, type, score and mass."""
    params: list[Any] = [visibility.tenant_id, text]
    vis = visibility_sql(visibility, params, "s", id_column="observation_id")
    # the postings carry valid_from but no said_at: the window is applied below, in two parts
    in_force = dataclasses.replace(where, within=None)
    flt = search_filter_sql(in_force, params, "s")
    params.extend([limit, query_words(text)])
    k, words = f"${len(params) - 1}", f"${len(params)}"
    if plan is None:
        docs = "coalesce((SELECT bm25_docs FROM search_stats WHERE tenant_id = $1), 0)::float8"
    else:
        params.append(plan.bm25_docs)
        docs = f"${len(params)}::float8"
    params.extend([exact_below, postings_per_term])
    exact, m = f"${len(params) - 1}", f"${len(params)}"
    dated, undated = "", ""
    if where.within is not None:
        params.extend(where.within)
        start, end = f"${len(params) - 1}::timestamptz", f"${len(params)}::timestamptz"
        dated = f"AND s.valid_from >= {start} AND s.valid_from < {end}"
        # a memory without a valid-from time, said in the window: few, read by document
        document = search_filter_sql(in_force, params, "d")
        undated = f"""
          UNION ALL
          SELECT s.observation_id, s.impact, s.type, qi.idf
          FROM search_documents d JOIN search_terms s ON s.observation_id = d.observation_id
          JOIN qi ON qi.term = s.term
          WHERE d.tenant_id = $1 AND d.valid_from IS NULL AND d.said_at >= {start} AND d.said_at < {end}
            AND {document} AND s.tenant_id = $1 AND {vis}"""
    scored = f"""
        SELECT p.observation_id::text AS id, min(p.type) AS type, sum(p.idf * p.impact)::float8 AS score,
          (SELECT mass FROM qm) AS mass
        FROM (
          SELECT b.observation_id, b.impact, b.type, qi.idf FROM qi CROSS JOIN LATERAL (
            SELECT s.observation_id, s.impact, s.type FROM search_terms s
            WHERE s.tenant_id = $1 AND s.term = qi.term AND {vis} AND {flt} {dated}
            ORDER BY s.impact DESC
            LIMIT CASE WHEN (SELECT docs FROM n) < {exact} THEN NULL ELSE {m}::bigint END
          ) b{undated}
        ) p
        GROUP BY p.observation_id"""

    sql = f"""
        WITH {_query_terms_sql(docs, words)}{scored}
        ORDER BY score DESC, id
        LIMIT {k}
        """
    return sql, params


def _query_terms_sql(docs: str, words: str) -> str:
    """The BM25 statement's common table expressions of the query (the text is $2, the tenant $1):
    its terms (`q`), the tenant's document count (`n`, from `docs`), each term's idf (`qi`) and the
    query's weight (`qw`, `qm`, from the words in the parameter `words`)."""
    configs = " UNION ".join(f"SELECT lexeme FROM unnest(to_tsvector('{c}', $2::text))" for c in SEARCH_CONFIGS)
    stems = " || ".join(f"tsvector_to_array(to_tsvector('{c}', w))" for c in SEARCH_CONFIGS)
    stop = " OR ".join(f"to_tsvector('{c}', w) = ''::tsvector" for c in SEARCH_CONFIGS)
    # document frequencies come from `search_term_stats` (kept exact by triggers on the
    # postings), not from counting each query term's postings. One probe per query term: (tenant,
    # term) is its key, so LIMIT 1 changes no result, but it keeps the planner from turning the
    # lookup into a join. With statistics older than a tenant's growth (a tenant estimated at one
    # row) it merge-joined the query's terms with all of the tenant's vocabulary: 5,525 rows read
    # for 3 terms, 2.2 ms against 0.15 ms, and growing with the vocabulary (bench/RESULTS.md).
    return f"""q AS (SELECT DISTINCT lexeme AS term FROM ({configs}) x),
        n AS (SELECT {docs} AS docs),
        qi AS MATERIALIZED (
          SELECT q.term, {BM25_IDF_SQL.format(df="ts.doc_freq")} AS idf
          FROM q CROSS JOIN LATERAL (
            SELECT ts.doc_freq FROM search_term_stats ts WHERE ts.tenant_id = $1 AND ts.term = q.term
              AND ts.doc_freq > 0
            LIMIT 1
          ) ts
        ),
        -- the query's weight (`ranking.lexical_weight`): its words' idf, at df 0 if no memory has them;
        -- OFFSET 0 reads each word's df once (pulled up, the idf's two mentions of df read it twice)
        qw AS (SELECT {stems} AS stems FROM unnest({words}::text[]) w WHERE NOT ({stop})),
        qm AS MATERIALIZED (
          SELECT coalesce(sum({BM25_IDF_SQL.format(df="df")}), 0)::float8 AS mass FROM (
            SELECT coalesce((SELECT min(ts.doc_freq) FROM search_term_stats ts WHERE ts.tenant_id = $1
              AND ts.term = ANY(qw.stems) AND ts.doc_freq > 0), 0) AS df FROM qw OFFSET 0) x
        )"""
