"""Checkpoint formats, a file each: Hugging Face folders (`checkpoint.py`, `sizes.py`), sentence-transformers
folders, Google's TensorFlow checkpoints (`tf_checkpoint.py`, `crc32c.py`, `google_checkpoint.py`)."""
