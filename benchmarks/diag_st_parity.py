"""bertforge's sentence embeddings against sentence-transformers on folders sentence-transformers itself wrote.

For each pooling (mean, cls, max, lasttoken), with and without a Normalize module, sentence-transformers saves
all-MiniLM-L6-v2 as a folder of its own (its Transformer, Pooling and Normalize modules, its file layout);
`bertforge.pipeline(model=FOLDER)` (its task and defaults read from the folder) and
`SentenceTransformer(FOLDER).encode` then embed the 872 SST-2 dev sentences. Printed: the largest cosine
distance and absolute difference per setting, then the speed of both on the first setting (medians of
interleaved repetitions, batches of 32). Last line: `ratio=<bertforge/sentence-transformers time>`.

    python -m benchmarks.diag_st_parity [--repeats 3]
"""

import argparse
import tempfile
from pathlib import Path

from benchmarks.common import SHARED, interleaved, median, setup

import numpy as np  # noqa: E402

SETTINGS = [(pooling, normalize) for pooling in ("mean", "cls", "max", "lasttoken") for normalize in (True, False)]


def saved_by_sentence_transformers(root: Path, pooling: str, normalize: bool) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer

    encoder = Transformer(str(SHARED / "models" / "all-MiniLM-L6-v2"), max_seq_length=256)
    modules = [encoder, Pooling(encoder.auto_model.config.hidden_size, pooling_mode=pooling)]
    folder = root / f"{pooling}-{'normalized' if normalize else 'raw'}"
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu").save(str(folder))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions of each, interleaved")
    args = parser.parse_args()
    setup()
    from sentence_transformers import SentenceTransformer

    import bertforge

    dev = (SHARED / "data" / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [line.split("\t")[0] for line in dev]
    print(f"{len(texts)} SST-2 dev sentences, all-MiniLM-L6-v2, folders written by sentence-transformers")
    print("| pooling | Normalize | max cosine distance | max abs difference |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        timed = None
        for pooling, normalize in SETTINGS:
            folder = saved_by_sentence_transformers(Path(tmp), pooling, normalize)
            theirs_model = SentenceTransformer(str(folder), device="cpu")
            ours_model = bertforge.pipeline(model=folder)
            theirs = theirs_model.encode(texts, batch_size=32, convert_to_numpy=True)
            ours = np.array(ours_model(texts), dtype=np.float32)
            norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
            distance = 1 - (ours.astype(np.float64) * theirs).sum(1) / norms
            print(f"| {pooling} | {'yes' if normalize else 'no'} | {distance.max():.2e} | "
                  f"{np.abs(ours - theirs).max():.2e} |")
            timed = timed or (ours_model, theirs_model)
        ours_model, theirs_model = timed
        times = {name: median(seconds) for name, seconds in interleaved(
            {"bertforge": lambda: ours_model(texts),
             "sentence-transformers": lambda: theirs_model.encode(texts, batch_size=32)}, args.repeats).items()}
    for name, seconds in times.items():
        print(f"{name}: {seconds:.2f} s for {len(texts)} sentences ({len(texts) / seconds:.0f} sentences/s)")
    print(f"ratio={times['bertforge'] / times['sentence-transformers']:.2f}")


if __name__ == "__main__":
    main()
