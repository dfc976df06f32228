"""Layer 2: what a user does (submit, sync, pull, move, tunnel...), over a transport; data in, data out.

Rooms, lowest first (a module imports its own room and lower ones: tests/gpujob/test_usecase_rooms.py):
secrets; notify, sync, hosts, lab (and the laptop-only ``init``, ``datacheck``); experiments; jobs;
power; launch; relocate.
"""
