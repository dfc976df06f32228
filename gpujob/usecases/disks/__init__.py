"""Stopped instances' disks: a platform releases an instance powered off too long and wipes its disk
(AutoDL: after 15 days). The countdown of each powered-off host, the checkpoints that exist only
there, and the warnings 3 days and 1 day before (docs/power.md, "Powered off too long")."""
