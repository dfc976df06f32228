"""Where a job's metrics come from: its metrics file, TensorBoard events, its log."""
