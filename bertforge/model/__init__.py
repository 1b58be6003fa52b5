"""Layer 3: the model. Its configuration, the encoder and its heads (`bert.py`), the head registry, checkpoint
folders (Hugging Face, Google's TensorFlow, sentence-transformers) read and written."""
