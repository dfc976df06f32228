"""Layer 3: job files, host profiles and the laptop's stored state (no I/O to hosts)."""
