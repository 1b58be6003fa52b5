"""Layer 7: the training loop that pre-training and fine-tuning share, its options, optimizer, run folders and
resumption."""
