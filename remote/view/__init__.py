"""Documents a reader sees: a job's status, its cost, its log and TensorBoard."""
