"""What a sweep's study says, for the dashboard's charts: Optuna's optimisation history, the
trials' parameters for parallel coordinates, and Optuna's parameter importances.

Read from the study in ``<state>/sweeps.sqlite`` or the lab's shared storage (no host is asked); the importances are
``optuna.importance.get_param_importances`` with PED-ANOVA: plain NumPy, so the ``sweep`` extra alone draws them
(fANOVA and mean-decrease-impurity import scikit-learn, which no extra installs), and a reload draws the same bars.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from gpujob.jsontypes import JSONObject
from gpujob.usecases.experiments.sweep import import_optuna, load_study
from gpujob.usecases.lab.storage import storage_of


def _axis(dist: Any) -> JSONObject:
    """One parameter's axis from its Optuna distribution: categorical (its choices) or a range."""
    choices = getattr(dist, "choices", None)
    if choices is not None:
        return {"kind": "categorical", "choices": [c if isinstance(c, (int, float, str, bool)) or c is None else str(c)
                                                   for c in choices]}
    return {"kind": "log" if getattr(dist, "log", False) else "linear", "low": dist.low, "high": dist.high}


def sweep_insight(name: str) -> JSONObject:
    """{sweep, metric, direction, history: [{number, value, best}], axes: {param: axis},
    trials: [{number, job_id, value, params}], importances: {param: share} | None, why_no_importances}"""
    optuna = import_optuna()
    study = load_study(optuna, name, storage_of(name, None))  # a shared sweep: the storage this laptop used
    TS = optuna.trial.TrialState
    done = sorted((t for t in study.get_trials(deepcopy=False, states=(TS.COMPLETE,))
                   if t.value is not None and math.isfinite(t.value)), key=lambda t: t.number)
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    history, best = [], None
    for t in done:  # what plot_optimization_history draws: each trial's value and the best so far
        best = t.value if best is None else (max if maximize else min)(best, t.value)
        history.append({"number": t.number, "value": t.value, "best": best})
    axes: JSONObject = {}
    for t in done:
        for p, dist in t.distributions.items():
            axes.setdefault(p, _axis(dist))
    importances, why = None, None
    if len(done) < 2:
        why = "Optuna needs two completed trials or more for importances"
    else:
        importances, why = _importances(optuna, study)
    return {"sweep": study.study_name, "metric": (study.user_attrs.get("sweep") or {}).get("metric"),
            "direction": "maximize" if maximize else "minimize", "history": history, "axes": axes,
            "trials": [{"number": t.number, "job_id": t.user_attrs.get("job_id"), "value": t.value,
                        "params": t.params} for t in done],
            "importances": importances, "why_no_importances": why}


def _importances(optuna: Any, study: Any) -> tuple[JSONObject | None, str | None]:
    """(importances, None), or (None, why not): whatever Optuna lacks or raises, the rest of the page shows."""
    evaluator = getattr(optuna.importance, "PedAnovaImportanceEvaluator", None)
    if evaluator is None:
        return None, f"Optuna {optuna.__version__} has no PED-ANOVA importance evaluator: pip install -U 'optuna>=4.0'"
    try:
        with warnings.catch_warnings():  # e.g. "the quantiles select the same trials": the bars say it
            warnings.simplefilter("ignore")
            return dict(optuna.importance.get_param_importances(study, evaluator=evaluator())), None
    except ImportError as e:  # a library the evaluator needs and this Python lacks
        return None, f"Optuna could not weigh the parameters: it needs {e.name or e}, not installed here"
    except Exception as e:  # noqa: BLE001 - an optional figure: the history and coordinates still show
        return None, f"Optuna could not weigh the parameters: {type(e).__name__}: {e}"
