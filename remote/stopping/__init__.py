"""Stopping a job for certain: finding every process of it, ending them, proving they are gone.

``find``: a job's processes by every means the host allows; ``cgroup``: a per-job cgroup where
the host lets us create one; ``reaper``: the supervisor as a child subreaper; ``verb``: the
``stop`` verb, which acts itself when the supervisor does not; ``after``: stop at the next
complete checkpoint.
"""
