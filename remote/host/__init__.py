"""This instance: GPUs, the preflight bench, doctor, authorized keys, the OOM killer's evidence."""
