"""Layer 9: the HTTP server: bertforge's routes, text-embeddings-inference's and OpenAI's, the batcher, the guards."""
