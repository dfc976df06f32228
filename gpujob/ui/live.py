"""Views redrawn in place (``status JOB -w``, ``status -w``): one fetch per refresh, drawn with rich's Live."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from gpujob.ui.jobs import job_panel, jobs_table
from gpujob.ui.output import console

if TYPE_CHECKING:
    from gpujob.api import results


def live_status(fetch: Callable[[], results.JobStatus], interval: float = 2.0) -> results.JobStatus:
    """Redraw a job's panel until the job ends or Ctrl-C; returns the last status."""
    from rich.live import Live

    st = fetch()
    with Live(job_panel(st.to_json()), console=console(), auto_refresh=False, transient=False) as lv:
        while not st.finished:
            time.sleep(interval)
            st = fetch()
            lv.update(job_panel(st.to_json()), refresh=True)
    return st


def live_table(fetch_all: Callable[[], results.JobList], interval: float = 2.0) -> None:
    """The job list, redrawn in place until Ctrl-C."""
    from rich.live import Live

    # a column short of the width: a line that fills it leaves the cursor past its end, where the
    # terminal's echo of ^C starts a row the redraw does not count (the header was drawn twice)
    def draw() -> Any:
        return jobs_table([j.to_json() for j in fetch_all().jobs], width=console().width - 1)

    with Live(draw(), console=console(), auto_refresh=False) as lv:
        while True:
            time.sleep(interval)
            lv.update(draw(), refresh=True)
