"""``gpujob stop``'s waits, decided by the use case (gpujob/usecases/jobs/stoppolicy.py), not the CLI."""

from gpujob.usecases.jobs.stoppolicy import AFTER_CHECKPOINT_WAIT, STOP_WAIT, stop_policy


def test_a_stop_waits_what_was_asked_else_its_checkpoint_then_the_end() -> None:
    assert stop_policy(None, False) == (STOP_WAIT, None)
    assert stop_policy(5.0, False) == (5.0, None)
    # --after-checkpoint: the agent's own bound (True), or --max-wait's; then STOP_WAIT for the end
    assert stop_policy(None, True) == (AFTER_CHECKPOINT_WAIT + STOP_WAIT, True)
    assert stop_policy(None, True, 120.0) == (120.0 + STOP_WAIT, 120.0)
    assert stop_policy(None, True, 0.0) == (STOP_WAIT, 0.0)  # --max-wait 0s: at once, not the agent's bound
    assert stop_policy(7.0, True, 120.0) == (7.0, 120.0)  # --wait wins
