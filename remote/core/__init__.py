"""The floor: what both sides agree on (protocol), the layout under <root>, locks, processes, atomic files, the job spec."""
