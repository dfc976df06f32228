"""gpujob: run training jobs on rented GPU instances over SSH, supervised and resumable."""

__version__ = "0.1.0"
