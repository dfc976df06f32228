"""Checkpoints that outlive the instance: ``checkpoint.mirror`` (standard library only).

* ``config``   the job file's section: its checks and the normalised form spec.json keeps
* ``engine``   rclone: where it is (PATH, else ``<root>/tools/rclone``), how a target becomes an
               rclone path, the credentials as the rclone process's environment only
* ``store``    the layout on a mirror: ``<target>/<job>/<checkpoint>`` and, written last,
               ``<target>/<job>/.complete/<checkpoint>.json`` (no marker: not a checkpoint), two slots per name
* ``version``  a checkpoint's identity by content (files' stamps, SHA-256): a name says nothing
* ``uploader`` the supervisor's thread that uploads each complete checkpoint (newest first)
"""
