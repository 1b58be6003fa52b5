"""`bertforge embed CORPUS --model M --out DIR`: a corpus's passages embedded into shards of vectors with a
manifest, as a stream, resumable (inference/embed.py does the work, inference/quantize.py the precisions); under
torchrun, each process embeds its share of the shards."""

import os
import time

from ..core.heap import bound_heap_growth
from ..core.flags import add_device_argument, add_encoding_argument, add_revision_argument, count
from ..inference.embed import BATCH_TOKENS, FORMATS, SHARD_ROWS, embed_corpus
from ..inference.quantize import PRECISIONS


def add_embed_arguments(parser):
    parser.add_argument("corpus", metavar="CORPUS", help="the passages: a text file (one a line), .csv or .tsv with "
                        "a header, .jsonl, or .parquet")
    parser.add_argument("--model", required=True, help="a sentence-embedding model: a folder (a "
                        "sentence-transformers one, or any checkpoint: mean pooling, normalised) or a Hub name")
    add_revision_argument(parser)
    parser.add_argument("--out", required=True, help="folder to write: manifest.json and the shards; a folder a run "
                        "stopped in is resumed where it stopped")
    parser.add_argument("--text-column", help="the column holding the passages (default: text)")
    parser.add_argument("--id-column", help="the column holding their ids (default: the row number, from 0)")
    add_encoding_argument(parser)
    parser.add_argument("--dimensions", type=count(1), help="keep the first N values of each vector (Matryoshka), "
                        "then unit length again where the model normalises (default: all)")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32", help="how vectors are stored: "
                        "int8/uint8 a byte per value (ranges from --calibration, else the first shard), "
                        "binary/ubinary a bit per value, packed")
    parser.add_argument("--calibration", help="int8/uint8: a .npy of float embeddings [rows, dims] whose per-value "
                        "minima and maxima set the ranges (kept in the manifest for queries)")
    parser.add_argument("--prompt", help="the name of a prompt the model folder declares (its "
                        "config_sentence_transformers.json \"prompts\"), put before each passage (default: the "
                        "folder's own choice, if it makes one)")
    parser.add_argument("--sparse", action="store_true", help="a SPLADE model (a sentence-transformers "
                        "SparseEncoder folder): a weight per vocabulary token, stored as CSR shards (indptr, indices, "
                        "values .npy)")
    parser.add_argument("--bf16", action="store_true", help="run the encoder under bfloat16 autocast")
    parser.add_argument("--batch-tokens", type=count(1), default=BATCH_TOKENS,
                        help="padded tokens per forward pass (passages of similar lengths are batched together)")
    parser.add_argument("--shard-rows", type=count(1), default=SHARD_ROWS, help="passages per shard")
    parser.add_argument("--format", choices=FORMATS, default="npy", help="npy: each shard's vectors (.npy) and ids "
                        "(.ids.json); parquet: a .parquet of ids and vectors too")
    add_device_argument(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run_embed(args) -> int:
    t0 = time.time()
    bound_heap_growth()  # batches of ever-changing shapes: +389 MB from 2k to 8k wikitext passages without it
    manifest = embed_corpus(args.corpus, args.out, args.model, revision=args.revision, text_column=args.text_column,
                            id_column=args.id_column, encoding=args.encoding, dimensions=args.dimensions,
                            precision=args.precision, calibration=args.calibration, prompt=args.prompt, bf16=args.bf16,
                            batch_tokens=args.batch_tokens, shard_rows=args.shard_rows, formats=[args.format],
                            device=args.device, progress=args.progress, sparse=args.sparse)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports for all
        return 0
    shards = len(manifest["shards"])
    kind = (f"sparse vectors over {manifest['dims']} tokens" if manifest.get("sparse") else
            f"{manifest['dims']}-value {manifest['precision']} vectors")
    print(f"{manifest['rows']} passages -> {args.out}: {shards} shard{'s' * (shards != 1)} of {kind} "
          f"({time.time() - t0:.1f} s)")
    return 0
