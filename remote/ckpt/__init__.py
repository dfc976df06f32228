"""Checkpoints: finding and judging them, files being written, the kept copy and its disk budget."""
