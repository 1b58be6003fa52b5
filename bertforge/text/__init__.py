"""Layer 2: text to token ids. The WordPiece tokenizer, vocabularies and their training, what an encoder is given."""
