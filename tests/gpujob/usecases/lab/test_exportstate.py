"""The MLflow export's state file (``<state>/mlflow-export.sqlite``): a URI holding a password, as an
older gpujob keyed its rows by, is gone from the file's bytes once it is opened again."""

from __future__ import annotations

import uuid
from pathlib import Path

from gpujob.usecases.lab.exportstate import ExportState


def test_a_uri_holding_a_password_is_scrubbed_from_the_state_file(tmp_path: Path) -> None:
    secret = "pw-" + uuid.uuid4().hex
    st = ExportState()
    st.put("job-a", f"http://alice:{secret}@mlflow.lab:5000", "r1", 1.0, {"loss": [3, 0.5]}, ["lr"], "FINISHED")
    st.put("job-b", "http://mlflow.lab:5000", "r2", 2.0, {}, [], "RUNNING")
    st.close()
    path = tmp_path / "state" / "mlflow-export.sqlite"
    assert secret.encode() in path.read_bytes()  # what an older gpujob left

    st = ExportState()
    try:
        assert st.get("job-b", "http://mlflow.lab:5000")["run_id"] == "r2"  # the rest kept
        assert st.versions("http://mlflow.lab:5000") == {"job-b": 2.0}
    finally:
        st.close()
    assert secret.encode() not in path.read_bytes()
    assert not [p for p in path.parent.iterdir() if secret.encode() in p.read_bytes()]
