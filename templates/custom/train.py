"""Placeholder: replace with your training script, or point `run:` in job.yaml at it.

This one shows the gpujob contract with the standard library only: resume from
GPUJOB_RESUME, report metrics, stop cleanly on a stop request.
"""

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    out = Path(os.environ.get("GPUJOB_CKPT_DIR") or "checkpoints")
    resume = os.environ.get("GPUJOB_RESUME") or ""
    stop_file = os.environ.get("GPUJOB_STOP_FILE") or ""
    metrics = Path(os.environ.get("GPUJOB_METRICS_FILE") or "metrics.jsonl")
    step = json.loads((Path(resume) / "state.json").read_text())["step"] if resume else 0
    while step < 20:
        step += 1
        time.sleep(0.05)  # one training step
        with open(metrics, "a") as f:
            f.write(json.dumps({"t": time.time(), "step": step, "loss": 1.0 / step}) + "\n")
        if step % 5 == 0 or (stop_file and os.path.exists(stop_file)):
            tmp, final = out / f".tmp-step-{step}", out / f"step-{step}"
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "state.json").write_text(json.dumps({"step": step}))
            (tmp / ".gpujob-complete").write_text("")  # written last
            os.replace(tmp, final)
        if stop_file and os.path.exists(stop_file):
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
