"""What a lab shares: runs exported to its MLflow server, sweeps in a shared Optuna storage (docs/experiments.md)."""
