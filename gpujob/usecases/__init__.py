"""Layer 2: what a user does (submit, sync, pull, move, tunnel...), over a transport; data in, data out."""
