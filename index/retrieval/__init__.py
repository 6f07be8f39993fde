"""The retrieval side: feature vectors, the FAISS index in a store's cache directory, nearest entries."""
