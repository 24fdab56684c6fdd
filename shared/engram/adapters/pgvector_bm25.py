"""The pgvector index's BM25 statement (`PgVectorIndex.lexical_in`).

A document scores the sum over the query's terms of idf (from `search_term_stats`, exact
document frequencies) times the posting's stored impact (the document side of BM25,
`pgvector_writes`); the query's weight (`ranking.lexical_weight`) comes beside it. Each query
term reads its best postings through the covering (tenant, term, impact) index with the search's
filter in that scan (migration 0013): all of them below `exact_below` documents, at most
`postings_per_term` above.

A search within a window (`SearchFilter.within`) first reads the window's documents (`wd`: a
day or a month of one tenant, through the partial indexes on valid_from and said_at of migration
0021) and keeps the postings of those. The postings carry no said_at, and a memory without a
valid-from time is in a window by when it was said. The scores are those of the whole search.
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
    # the postings carry no said_at: a window is the set of its documents (`wd`), read first
    flt = search_filter_sql(dataclasses.replace(where, within=None), params, "s")
    params.extend([limit, query_words(text), exact_below, postings_per_term])
    k, words, exact, m = (f"${len(params) - i}" for i in (3, 2, 1, 0))
    if plan is None:
        docs = "coalesce((SELECT bm25_docs FROM search_stats WHERE tenant_id = $1), 0)::float8"
    else:
        params.append(plan.bm25_docs)
        docs = f"${len(params)}::float8"
    configs = " UNION ".join(f"SELECT lexeme FROM unnest(to_tsvector('{c}', $2::text))" for c in SEARCH_CONFIGS)
    stems = " || ".join(f"tsvector_to_array(to_tsvector('{c}', w))" for c in SEARCH_CONFIGS)
    stop = " OR ".join(f"to_tsvector('{c}', w) = ''::tsvector" for c in SEARCH_CONFIGS)
    window, in_window, window_from = "", "", ""
    if where.within is not None:
        dated = search_filter_sql(where, params, "d")
        window = f""",
        wd AS MATERIALIZED (
          SELECT array_agg(d.observation_id) AS ids FROM search_documents d WHERE d.tenant_id = $1 AND {dated}
        )"""
        in_window, window_from = "AND s.observation_id = ANY(wd.ids)", ", wd"
    scored = f"""
        SELECT p.observation_id::text AS id, min(p.type) AS type, sum(qi.idf * p.impact)::float8 AS score,
          (SELECT mass FROM qm) AS mass
        FROM qi CROSS JOIN LATERAL (
          SELECT s.observation_id, s.impact, s.type FROM search_terms s{window_from}
          WHERE s.tenant_id = $1 AND s.term = qi.term AND {vis} AND {flt} {in_window}
          ORDER BY s.impact DESC
          LIMIT CASE WHEN (SELECT docs FROM n) < {exact} THEN NULL ELSE {m}::bigint END
        ) p
        GROUP BY p.observation_id"""

    # document frequencies come from `search_term_stats` (kept exact by triggers on the
    # postings), not from counting each query term's postings
    sql = f"""
        WITH q AS (SELECT DISTINCT lexeme AS term FROM ({configs}) x),
        n AS (SELECT {docs} AS docs),
        qi AS MATERIALIZED (
          SELECT q.term, {BM25_IDF_SQL.format(df="ts.doc_freq")} AS idf
          FROM q JOIN search_term_stats ts ON ts.tenant_id = $1 AND ts.term = q.term
          WHERE ts.doc_freq > 0
        ),
        -- the query's weight (`ranking.lexical_weight`): its words' idf, at df 0 if no memory has them
        qw AS (SELECT {stems} AS stems FROM unnest({words}::text[]) w WHERE NOT ({stop})),
        qm AS MATERIALIZED (
          SELECT coalesce(sum({BM25_IDF_SQL.format(df="df")}), 0)::float8 AS mass FROM (
            SELECT coalesce((SELECT min(ts.doc_freq) FROM search_term_stats ts WHERE ts.tenant_id = $1
              AND ts.term = ANY(qw.stems) AND ts.doc_freq > 0), 0) AS df FROM qw) x
        ){window}{scored}
        ORDER BY score DESC, id
        LIMIT {k}
        """
    return sql, params
