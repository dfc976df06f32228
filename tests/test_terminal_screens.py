"""What a user sees on a real terminal (tmux, 80 and 120 columns): the README's first command,
``tail -f``, ``status -w`` and every table, read off the screen: no reprinted progress bar, no line
the terminal had to wrap, no number cut."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import EXAMPLE
from tests.screen import Screen, assert_fits

WIDTHS = (80, 120)
BAR = re.compile(r"━|sync →|\d+(\.\d+)? ?[kMG]?B/s")  # the transfer bar's glyphs, label and rate


@pytest.mark.parametrize("width", WIDTHS)
def test_submit_follow_prints_the_log_without_the_finished_bar(tmp_path: Path, width: int) -> None:
    with Screen(tmp_path, width, 24) as s:
        s.run("submit", str(EXAMPLE), "--follow")
        assert s.wait_exit() == 0, s.text()
        rows = s.rows()
        steps = [r for r in rows if re.search(r"\bstep \d+", r)]
        assert len(steps) >= 4, s.text()
        assert not [r for r in rows if BAR.search(r)], "the sync bar was left on the screen:\n" + s.text()
        # each log line whole on its row, as the script printed it (a line longer than the screen,
        # the script's own, wraps as on any terminal: gpujob's lines never do)
        assert all(re.fullmatch(r"step \d+ loss [0-9.]+", r) for r in steps), s.text()
        assert_fits(s, ours=lambda r: r.startswith(("==>", "submitted", "tiny-")))
