"""The laptop's secrets, and what never leaves the laptop whatever the ignore files say (docs/security.md).

``file``: the secrets file (``secrets.env``) and the environment; ``job``: the secrets a job names;
``never_sent``: keys, credential files and files holding a declared secret are withheld from
every upload; ``workdir``: a home folder, or a tree far larger than a project, is refused
before it is walked or sent."""

from gpujob.usecases.secrets.never_sent import declared_values, withhold
from gpujob.usecases.secrets.workdir import check_home, check_size

__all__ = ["check_home", "check_size", "declared_values", "withhold"]
