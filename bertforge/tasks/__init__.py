"""Fine-tuning tasks, one module per family: readers, featurisation, metrics."""
