"""A job on a Slurm host (issue 45): its batch script and its submit through sbatch; what Slurm says of a
job is remote/core/slurmq.py (the liveness rule asks it), the supervisor under an allocation remote/run/slurmjob.py."""
