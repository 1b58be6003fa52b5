"""`bertforge search DIR "query"`: the passages of an embeddings folder (`bertforge embed`) nearest a query, by exact
inner product over its shards (inference/search.py), or with --index, among the candidates of an approximate index
(`bertforge index`, inference/vector_index.py); with --queries and --qrels, the retrieval metrics of a set of
queries against relevance judgements (tasks/metrics.py `search_metrics`)."""

import json

from ..core.errors import BertforgeError
from ..core.flags import add_device_argument, add_encoding_argument, add_revision_argument, count
from ..core.tables import passages, qrels as read_qrels
from ..inference.search import RESCORE
from .index import add_search_options

QUERY_BATCH = 256  # queries embedded and searched at a time


def add_search_arguments(parser):
    parser.add_argument("dir", metavar="DIR", help="an embeddings folder written by bertforge embed")
    parser.add_argument("query", nargs="*", help="query texts")
    parser.add_argument("--model", help="the model to embed queries with (default: the folder's manifest's, at its "
                        "commit)")
    add_revision_argument(parser)
    parser.add_argument("--top-k", type=count(1), default=10, help="hits per query")
    parser.add_argument("--rescore", type=count(0), default=RESCORE, help="int8/binary folders, or --index: "
                        "candidates rescored with the float query against their stored vectors (0: the quantized or "
                        "the index's scores)")
    parser.add_argument("--index", metavar="KIND|FILE", help="search an approximate index (bertforge index) instead of "
                        "every vector: faiss or usearch, the folder's own index of that kind, or an index file; "
                        "refused if the folder changed since it was built")
    add_search_options(parser, at_build=False)
    parser.add_argument("--rerank", metavar="MODEL", help="score each query's hits again with this cross-encoder (a "
                        "sequence classifier of one output over (query, passage), as text-embeddings-inference's "
                        "/rerank: the sigmoid of its logit; a folder or a Hub name) and order them by it; the "
                        "passages' texts are read again from the corpus the folder was embedded from")
    parser.add_argument("--queries", help="a file of queries (as bertforge embed reads a corpus) to evaluate with "
                        "--qrels")
    parser.add_argument("--qrels", help="relevance judgements: BEIR's TSV (query-id, corpus-id, score) or TREC's")
    parser.add_argument("--query-text-column", help="--queries: the column holding the queries (default: text)")
    parser.add_argument("--query-id-column", help="--queries: the column holding their ids, as --qrels names them "
                        "(default: the row number, from 0)")
    add_encoding_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON: the hits of each query, or the metrics")
    add_device_argument(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run_search(args) -> int:
    from ..inference.search import Index, query_embedder

    if bool(args.queries) != bool(args.qrels):
        raise BertforgeError("--queries and --qrels go together: the queries to run and their judgements")
    if args.queries and args.query:
        raise BertforgeError("give query texts or --queries FILE, not both")
    if not args.queries and not args.query:
        raise BertforgeError("no query: give one or more query texts, or --queries FILE with --qrels FILE")
    index = Index(args.dir)
    if args.index:
        from ..inference.vector_index import open_index

        index.approximate = open_index(args.dir, index.manifest, args.index, {"nprobe": args.nprobe, "ef": args.ef})
    elif args.nprobe or args.ef:
        raise BertforgeError(f"{'--nprobe' if args.nprobe else '--ef'}: an option of --index, which is not given")
    embedder = query_embedder(index.manifest, args.model, args.device, args.revision)
    if args.queries:
        return evaluate(args, index, embedder)
    results = ranked(args, index, list(args.query), embedder, args.top_k)
    if args.json:
        print(json.dumps([{"query": q, "hits": [h.as_dict() for h in hits]} for q, hits in zip(args.query, results)],
                         ensure_ascii=False))
        return 0
    for query, hits in zip(args.query, results):
        print(query)
        for rank, hit in enumerate(hits, 1):
            print(f"{rank:>4}  {hit.score:.4f}  {hit.id}" + (f"  {hit.text}" if hit.text else ""))
    return 0


def ranked(args, index, queries: list[str], embedder, top_k: int, rescore: int | None = None) -> list:
    """Each query's top_k hits, reranked by --rerank's cross-encoder where given."""
    from ..inference.search import rerank

    results = index.search(embedder(queries), top_k, args.rescore if rescore is None else rescore)
    if args.rerank:
        results = rerank(queries, results, index.manifest, args.rerank, device=args.device, encoding=args.encoding)
    return results


def evaluate(args, index, embedder) -> int:
    from ..tasks.metrics import search_metrics

    judged = read_qrels(args.qrels, args.encoding)
    deepest = max(args.top_k, 100)
    rankings, batch = {}, []

    def run(batch):
        found = ranked(args, index, [text for _, text in batch], embedder, deepest,
                       args.rescore and max(args.rescore, deepest))
        rankings.update({key: [hit.id for hit in hits] for (key, _), hits in zip(batch, found)})

    for key, text in passages(args.queries, args.query_text_column, args.query_id_column, args.encoding):
        if key in judged:
            batch.append((key, text))
        if len(batch) == QUERY_BATCH:
            run(batch)
            batch = []
    if batch:
        run(batch)
    if not rankings:
        raise BertforgeError(f"--qrels {args.qrels}: judges none of the queries of {args.queries} (their ids: "
                             f"--query-id-column)")
    metrics = search_metrics(rankings, judged, k=10, recall_at=sorted({10, args.top_k, 100}))
    if args.json:
        print(json.dumps(metrics))
    else:
        print(" ".join(f"{name} {value:.4f}" if isinstance(value, float) else f"{name} {value}"
                       for name, value in metrics.items()))
    return 0
