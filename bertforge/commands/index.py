"""`bertforge index DIR --kind faiss|usearch`: an approximate nearest-neighbour index over an embeddings folder's
shards (inference/vector_index.py does the work), which `bertforge search DIR --index KIND` then reads instead of
scanning every vector."""

import time

from ..core.flags import count
from ..inference.vector_index import KINDS


def add_search_options(parser, at_build: bool):
    """The options a query of an index takes, which `index` records as the index's defaults and `search` overrides."""
    default = "default: 2 sqrt(lists), at least 16" if at_build else "default: the index's, set by bertforge index"
    parser.add_argument("--nprobe", type=count(1), help=f"faiss: the lists a query scans; more, better recall, slower "
                        f"({default})")
    default = "default: 64" if at_build else "default: the index's, set by bertforge index"
    parser.add_argument("--ef", type=count(1), help=f"usearch: the candidates a query keeps while it walks the graph; "
                        f"more, better recall, slower ({default})")


def add_index_arguments(parser):
    parser.add_argument("dir", metavar="DIR", help="an embeddings folder written by bertforge embed (float32, int8 or "
                        "uint8 vectors)")
    parser.add_argument("--kind", required=True, choices=KINDS, help="faiss: IVF-Flat (k-means lists, the nearest "
                        "--nprobe scanned); usearch: HNSW (a graph walked from the top); both by inner product; "
                        "pip install 'bertforge[index]'")
    parser.add_argument("--out", metavar="FILE", help="the index's record (JSON), its library's file written beside "
                        "it (default: DIR/index-KIND.json, which search --index KIND reads)")
    parser.add_argument("--nlist", type=count(1), help="faiss: the lists the vectors are clustered into (default: 4 "
                        "sqrt(vectors), at most 1 per 40 vectors)")
    parser.add_argument("--m", type=count(2), help="usearch: the links each vector keeps in the graph (default: 16)")
    parser.add_argument("--ef-construction", type=count(1), help="usearch: the candidates kept while a vector is "
                        "added (default: 128)")
    add_search_options(parser, at_build=True)
    parser.add_argument("--threads", type=count(0), default=0, help="the threads the build uses (default: 0, every "
                        "core); usearch: 1 builds the same graph every time, where several threads' graphs, and "
                        "so their answers, differ from build to build")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run_index(args) -> int:
    from ..inference.vector_index import build_index, index_path

    t0 = time.time()
    options = {"nlist": args.nlist, "nprobe": args.nprobe, "m": args.m, "ef_construction": args.ef_construction,
               "ef": args.ef}
    record = build_index(args.dir, args.kind, args.out, options, args.progress, args.threads)
    shown = ", ".join(f"{name.replace('_', '-')} {value}" for name, value in record["options"].items())
    print(f"{record['rows']} vectors of {args.dir} -> {args.out or index_path(args.dir, args.kind)}: {args.kind} "
          f"{record['structure']}, {shown} ({record['bytes'] / 2 ** 20:.1f} MiB, {time.time() - t0:.1f} s)")
    return 0
