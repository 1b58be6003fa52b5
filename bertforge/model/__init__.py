"""Layer 3: the model. Its configuration, the encoder and its pre-training heads (`bert.py`), the task heads
(`task_heads.py`), the head registry, checkpoint folders (Hugging Face, Google's TensorFlow, sentence-transformers)
read and written."""
