"""Pre-training data: Google's create_pretraining_data.py algorithm, fast and memory-bounded.

- :mod:`~bertforge.data.corpus`: files and folders -> documents of tokenized sentences (flat arrays).
- :mod:`~bertforge.data.instances`: Google's sentence-pair instances as token ranges.
- :mod:`~bertforge.data.masking`: masked-LM masking, vectorised (static here, dynamic in the trainer).
- :mod:`~bertforge.data.shards`: the on-disk format and its reader.
- :mod:`~bertforge.data.create`: the pipeline (the ``bertforge data create`` command is commands/data.py).
"""

from bertforge.data.create import create_pretraining_data
from bertforge.data.masking import mask_batch
from bertforge.data.shards import PretrainingShards, check_vocab, load_pretraining_data, vocab_sha256

__all__ = ["PretrainingShards", "check_vocab", "create_pretraining_data", "load_pretraining_data", "mask_batch",
           "vocab_sha256"]
