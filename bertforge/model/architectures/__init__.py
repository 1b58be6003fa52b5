"""The families bertforge reads: the registry (`registry.py`), their configs (`config.py`), the heads
(`heads.py`, `task_heads.py`), the fast path (`packing.py`) and a file per family."""
