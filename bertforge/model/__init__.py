"""Layer 3: the model. `architectures/`: the registry, the heads and a file per family (BERT top to bottom in
`bert.py`); `formats/`: checkpoint folders (Hugging Face, sentence-transformers, Google's TensorFlow) read and
written; here: the Auto classes, the reference's model API, students cut from a teacher, sentence encoders."""
