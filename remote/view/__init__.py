"""Documents a reader sees: a job's status, the watch document, its cost, and its TensorBoard."""
