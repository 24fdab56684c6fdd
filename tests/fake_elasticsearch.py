"""A small Elasticsearch 8 stand-in on loopback, for transport-level tests of the adapter.

It speaks the HTTP API the official async client uses (index templates, index create/exists/
delete, `_bulk` NDJSON with external versions, `_search` with `query`, `knn`, `retriever.rrf`,
`sort` + `search_after`) and answers with realistic bodies and the `X-Elastic-Product:
Elasticsearch` header the client insists on. It really stores documents and evaluates the
query DSL the adapter sends (bool/term/terms/range/exists/ids/match_all/multi_match, kNN by
brute-force cosine with `knn.filter` applied before ranking), so the shared behavioural suite
checks the adapter's filters by their effect. Text analysis is simplified (lower-case word
tokens, no stemming); the real cluster's English/German analysers are not emulated. Every
request is recorded so tests can assert exact request bodies.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

HEADERS = {"X-Elastic-Product": "Elasticsearch"}
CONTENT_TYPE = "application/vnd.elasticsearch+json;compatible-with=8"
_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    return [t.casefold() for t in _TOKEN.findall(text or "")]


@dataclass
class Recorded:
    method: str
    path: str
    params: dict[str, str]
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Doc:
    id: str
    source: dict[str, Any]
    version: int


@dataclass
class Index:
    name: str
    mappings: dict[str, Any]
    docs: dict[str, Doc] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)


def _error(status: int, etype: str, reason: str) -> web.Response:
    body = {
        "error": {"root_cause": [{"type": etype, "reason": reason}], "type": etype, "reason": reason},
        "status": status,
    }
    return _ok(body, status)


def _ok(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, headers={**HEADERS, "Content-Type": CONTENT_TYPE})


class FakeElasticsearch:
    def __init__(self) -> None:
        self.templates: dict[str, dict[str, Any]] = {}
        self.indices: dict[str, Index] = {}
        self.requests: list[Recorded] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> FakeElasticsearch:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def requests_to(self, method: str, path_part: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and path_part in r.path]

    # ---- routing ----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        path = request.path
        body: Any = None
        if raw:
            if path.endswith("/_bulk"):
                body = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
            else:
                body = json.loads(raw)
        self.requests.append(Recorded(request.method, path, dict(request.query), body, dict(request.headers)))
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["_index_template"] and request.method == "PUT":
            self.templates[parts[1]] = body
            return _ok({"acknowledged": True})
        if parts == ["_bulk"]:
            return self.bulk(body or [])
        if len(parts) == 1 and not parts[0].startswith("_"):
            return self.index_op(request.method, parts[0])
        if len(parts) == 2 and parts[1] == "_search":
            return self.search(parts[0], body or {})
        if len(parts) == 2 and parts[1] == "_mapping" and request.method == "PUT":
            return self.put_mapping(parts[0], body or {})
        if len(parts) == 2 and parts[1] == "_refresh":
            return _ok({"_shards": {"total": 1, "successful": 1, "failed": 0}})
        if not parts:
            return _ok(
                {
                    "name": "fake",
                    "cluster_name": "fake",
                    "version": {"number": "8.19.3"},
                    "tagline": "You Know, for Search",
                }
            )
        return _error(400, "illegal_argument_exception", f"unsupported request {request.method} {path}")

    def index_op(self, method: str, name: str) -> web.Response:
        if method == "HEAD":
            return web.Response(status=200 if name in self.indices else 404, headers=HEADERS)
        if method == "PUT":
            if name in self.indices:
                return _error(400, "resource_already_exists_exception", f"index [{name}] already exists")
            mappings: dict[str, Any] = {}
            for template in self.templates.values():
                if any(re.fullmatch(p.replace("*", ".*"), name) for p in template.get("index_patterns", [])):
                    mappings = copy.deepcopy(template.get("template", {}).get("mappings", {}))
            self.indices[name] = Index(name, mappings)
            return _ok({"acknowledged": True, "shards_acknowledged": True, "index": name})
        if method == "DELETE":
            if name not in self.indices:
                return _error(404, "index_not_found_exception", f"no such index [{name}]")
            del self.indices[name]
            return _ok({"acknowledged": True})
        return _error(405, "method_not_allowed", method)

    def put_mapping(self, name: str, body: dict[str, Any]) -> web.Response:
        """New fields join the mapping; a field already there must be mapped the same (as ES)."""
        index = self.indices.get(name)
        if index is None:
            return _error(404, "index_not_found_exception", f"no such index [{name}]")
        properties = index.mappings.setdefault("properties", {})
        for fname, spec in body.get("properties", {}).items():
            if fname in properties and properties[fname] != spec:
                return _error(400, "illegal_argument_exception", f"mapper [{fname}] cannot be changed")
            properties[fname] = spec
        return _ok({"acknowledged": True})

    # ---- bulk -------------------------------------------------------------------------------

    def bulk(self, lines: list[dict[str, Any]]) -> web.Response:
        items: list[dict[str, Any]] = []
        it: Iterator[dict[str, Any]] = iter(lines)
        for action in it:
            ((op, meta),) = action.items()
            name, doc_id = meta["_index"], str(meta["_id"])
            index = self.indices.get(name)
            if index is None:  # auto-create from the template, as ES does
                self.index_op("PUT", name)
                index = self.indices[name]
            version = int(meta.get("version", 1))
            current = index.docs[doc_id].version if doc_id in index.docs else index.tombstones.get(doc_id)
            base = {"_index": name, "_id": doc_id}
            if meta.get("version_type") == "external_gte" and current is not None and version < current:
                if op == "index":
                    next(it)
                items.append(
                    {
                        op: {
                            **base,
                            "status": 409,
                            "error": {
                                "type": "version_conflict_engine_exception",
                                "reason": f"[{doc_id}]: version conflict, current version [{current}] is higher"
                                f" than [{version}]",
                            },
                        }
                    }
                )
                continue
            if op == "index":
                source = next(it)
                unknown = set(source) - set(index.mappings.get("properties", {}))
                if index.mappings.get("dynamic") == "strict" and unknown:
                    items.append(
                        {
                            op: {
                                **base,
                                "status": 400,
                                "error": {
                                    "type": "strict_dynamic_mapping_exception",
                                    "reason": "mapping set to strict, dynamic introduction of"
                                    f" [{sorted(unknown)[0]}] is not allowed",
                                },
                            }
                        }
                    )
                    continue
                created = doc_id not in index.docs
                index.docs[doc_id] = Doc(doc_id, source, version)
                index.tombstones.pop(doc_id, None)
                items.append(
                    {
                        op: {
                            **base,
                            "_version": version,
                            "result": "created" if created else "updated",
                            "status": 201 if created else 200,
                        }
                    }
                )
            elif op == "delete":
                if doc_id in index.docs:
                    del index.docs[doc_id]
                    index.tombstones[doc_id] = version
                    items.append({op: {**base, "_version": version, "result": "deleted", "status": 200}})
                else:
                    index.tombstones[doc_id] = version
                    items.append({op: {**base, "_version": version, "result": "not_found", "status": 404}})
            else:
                items.append(
                    {op: {**base, "status": 400, "error": {"type": "illegal_argument_exception", "reason": op}}}
                )
        errors = any(i[next(iter(i))]["status"] >= 300 for i in items)
        return _ok({"took": 1, "errors": errors, "items": items})

    # ---- search -----------------------------------------------------------------------------

    def search(self, name: str, body: dict[str, Any]) -> web.Response:
        index = self.indices.get(name)
        if index is None:
            return _error(404, "index_not_found_exception", f"no such index [{name}]")
        size = int(body.get("size", 10))
        docs = list(index.docs.values())
        if "retriever" in body:
            hits = self.rrf(index, body["retriever"]["rrf"], size)
        elif "knn" in body:
            hits = self.knn(docs, body["knn"])[:size]
        else:
            query = body.get("query", {"match_all": {}})
            scored = [(d, self.score(index, d, query)) for d in docs if self.matches(d, query)]
            if "sort" in body:
                ((sort_field, _order),) = body["sort"][0].items()
                scored.sort(key=lambda x: str(x[0].source.get(sort_field)))
                after = body.get("search_after")
                if after:
                    scored = [x for x in scored if str(x[0].source.get(sort_field)) > str(after[0])]
            else:
                scored.sort(key=lambda x: (-x[1], x[0].id))
            hits = [(d, s) for d, s in scored][:size]
        out = []
        for d, s in hits:
            hit: dict[str, Any] = {"_index": name, "_id": d.id, "_score": s}
            if "sort" in body:
                ((sort_field, _),) = body["sort"][0].items()
                hit["sort"] = [d.source.get(sort_field)]
            out.append(hit)
        return _ok(
            {
                "took": 1,
                "timed_out": False,
                "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                "hits": {
                    "total": {"value": len(out), "relation": "eq"},
                    "max_score": max((h["_score"] or 0 for h in out), default=None),
                    "hits": out,
                },
            }
        )

    def knn(self, docs: list[Doc], knn: dict[str, Any]) -> list[tuple[Doc, float]]:
        filters = knn.get("filter", [])
        flt = {"bool": {"filter": filters if isinstance(filters, list) else [filters]}}
        q = knn["query_vector"]
        qn = math.sqrt(sum(x * x for x in q)) or 1.0
        scored = []
        for d in docs:
            if not self.matches(d, flt):  # knn.filter applies during the search, before k is taken
                continue
            v = d.source[knn["field"]]
            vn = math.sqrt(sum(x * x for x in v)) or 1.0
            cos = sum(a * b for a, b in zip(q, v, strict=True)) / (qn * vn)
            scored.append((d, (1 + cos) / 2))  # ES's cosine score
        scored.sort(key=lambda x: (-x[1], x[0].id))
        return scored[: int(knn["k"])]

    def rrf(self, index: Index, rrf: dict[str, Any], size: int) -> list[tuple[Doc, float]]:
        k = int(rrf.get("rank_constant", 60))
        window = int(rrf.get("rank_window_size", size))
        totals: dict[str, float] = {}
        docs = list(index.docs.values())
        for retriever in rrf["retrievers"]:
            if "knn" in retriever:
                ranked = [d for d, _ in self.knn(docs, retriever["knn"])]
            else:
                query = retriever["standard"]["query"]
                scored = sorted(
                    ((d, self.score(index, d, query)) for d in docs if self.matches(d, query)),
                    key=lambda x: (-x[1], x[0].id),
                )
                ranked = [d for d, _ in scored]
            for rank, d in enumerate(ranked[:window], 1):
                totals[d.id] = totals.get(d.id, 0.0) + 1.0 / (k + rank)
        order = sorted(totals.items(), key=lambda x: (-x[1], x[0]))[:size]
        return [(index.docs[i], s) for i, s in order]

    # ---- query DSL --------------------------------------------------------------------------

    @staticmethod
    def _values(doc: Doc, path: str) -> list[Any]:
        if path == "_id":
            return [doc.id]
        value = doc.source.get(path.split(".")[0])
        if value is None:
            return []
        return value if isinstance(value, list) else [value]

    def matches(self, doc: Doc, q: dict[str, Any]) -> bool:
        ((kind, arg),) = q.items()
        if kind == "match_all":
            return True
        if kind == "bool":
            filters = [*self._list(arg.get("filter")), *self._list(arg.get("must"))]
            if not all(self.matches(doc, c) for c in filters):
                return False
            if any(self.matches(doc, c) for c in self._list(arg.get("must_not"))):
                return False
            should = self._list(arg.get("should"))
            need = int(arg.get("minimum_should_match", 0 if filters else 1)) if should else 0
            return sum(self.matches(doc, c) for c in should) >= need
        if kind == "term":
            ((f, v),) = arg.items()
            v = v["value"] if isinstance(v, dict) else v
            return v in self._values(doc, f)
        if kind == "terms":
            ((f, vs),) = arg.items()
            return bool(set(vs) & set(self._values(doc, f)))
        if kind == "ids":
            return doc.id in arg["values"]
        if kind == "exists":
            return bool(self._values(doc, arg["field"]))
        if kind == "range":
            ((f, bounds),) = arg.items()
            values = self._values(doc, f)
            if not values:
                return False
            v = datetime.fromisoformat(str(values[0]))
            for op, b in bounds.items():
                bound = datetime.fromisoformat(str(b))
                if (op == "gt" and not v > bound) or (op == "gte" and not v >= bound):
                    return False
                if (op == "lt" and not v < bound) or (op == "lte" and not v <= bound):
                    return False
            return True
        if kind == "multi_match":
            wanted = set(tokens(arg["query"]))
            return any(
                wanted & set(tokens(" ".join(map(str, self._values(doc, f.split("^")[0]))))) for f in arg["fields"]
            )
        raise ValueError(f"fake Elasticsearch does not evaluate {kind!r}")

    @staticmethod
    def _list(value: Any) -> list[dict[str, Any]]:
        if value is None:
            return []
        return value if isinstance(value, list) else [value]

    def score(self, index: Index, doc: Doc, q: dict[str, Any]) -> float:
        ((kind, arg),) = q.items()
        if kind == "bool":
            return sum(self.score(index, doc, c) for c in self._list(arg.get("must")))
        if kind != "multi_match":
            return 0.0
        per_field = []
        for spec in arg["fields"]:
            name, _, boost = spec.partition("^")
            per_field.append(self._bm25(index, doc, name.split(".")[0], tokens(arg["query"])) * float(boost or 1.0))
        best = max(per_field, default=0.0)
        return best + float(arg.get("tie_breaker", 0.0)) * (sum(per_field) - best)

    def _bm25(self, index: Index, doc: Doc, fname: str, query: list[str], k1: float = 1.2, b: float = 0.75) -> float:
        # per field, as Lucene: N and the average length over the documents with words in it
        docs = [d for d in index.docs.values() if tokens(str(d.source.get(fname) or ""))]
        lengths = [len(tokens(str(d.source.get(fname) or ""))) for d in docs]
        avg = (sum(lengths) / len(lengths)) if lengths else 1.0
        words = tokens(str(doc.source.get(fname) or ""))
        score = 0.0
        for term in set(query):
            tf = words.count(term)
            if not tf:
                continue
            df = sum(term in tokens(str(d.source.get(fname) or "")) for d in docs)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(words) / (avg or 1.0)))
        return score
