"""Layer 5: running a model. Batches, windows of long inputs, the runtimes (PyTorch, ONNX Runtime), pipelines,
features and ONNX export."""
