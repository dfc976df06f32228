"""``gpujob runs`` and ``gpujob compare`` over a ledger of 2,000 runs, against ``sqlite3`` reading the same rows.

A fresh state folder gets 2,000 runs (6 run-line arguments, 4 final and 4 best metrics, two
200-point curves each: what a status poll leaves in the ledger). Each command is a fresh
process, timed alternating with its yardstick; medians of ``--runs``. Targets: ``runs`` < 0.3 s,
``compare`` < 1 s. With ``--startup BASE`` (a checkout of the commit before the ledger, e.g.
``git archive e81b432 | tar -x -C /tmp/base``) it also times ``gpujob --help`` and ``gpujob ls``
on an empty ``local`` from both trees (Optuna must not be imported by either).

    python benchmarks/experiments/bench_ledger.py [--rows 2000] [--runs 11] [--startup /tmp/base] [--against /tmp/old]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def fill(n: int) -> list[str]:
    from gpujob.config.ledger import open_ledger

    rnd = random.Random(0)
    ids = []
    t0 = time.time() - 60 * n
    with open_ledger() as lg:
        lg.db.execute("BEGIN")
        for i in range(n):
            job_id = f"exp-{i:05d}"
            lr = 10 ** rnd.uniform(-5, -2)
            params = {"lr": lr, "batch": rnd.choice([16, 32, 64]), "wd": rnd.choice([0.0, 0.01, 0.1]),
                      "layers": rnd.randint(2, 12), "warmup": 100, "seed": i % 5}
            loss = [[s * 10, 3.0 * (1 - s / 250) + rnd.random() * 0.1] for s in range(200)]
            ev = [[s * 10, 3.2 * (1 - s / 260) + rnd.random() * 0.1] for s in range(200)]
            lg.put(job_id, name=rnd.choice(["gpt", "bert", "vit"]), host=rnd.choice(["a100-1", "a100-2", "4090"]),
                   state=rnd.choice(["succeeded", "succeeded", "failed", "stopped"]), submitted_at=t0 + 60 * i,
                   started_at=t0 + 60 * i + 5, ended_at=t0 + 60 * i + 50,
                   run_line="python train.py " + " ".join(f"--{k} {v}" for k, v in params.items()), params=params,
                   final={"loss": loss[-1][1], "eval_loss": ev[-1][1], "step": 1990, "lr": lr},
                   best={"loss": min(p[1] for p in loss), "eval_loss": min(p[1] for p in ev), "accuracy": rnd.random()},
                   series={"loss": loss, "eval_loss": ev}, loss_key="loss", code_hash=f"{i % 7:016x}",
                   env_hash="e" * 16, gpu_hours=0.0125, cost=0.025, currency="CNY", price_per_hour=2.0)
            ids.append(job_id)
        lg.db.execute("COMMIT")
    return ids


CPU: list[float] = []  # each timed process's user+sys seconds: what a loaded shared machine does not distort


def timed(cmd: list[str], env: dict[str, str]) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # run in the tree's own folder: ``python -m`` puts the working folder ahead of PYTHONPATH
    r = subprocess.run(cmd, capture_output=True, env=env, cwd=env.get("PYTHONPATH") or None)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if r.returncode:
        raise SystemExit(f"{cmd}: {r.stderr.decode()[-500:]}")
    return wall


def bench(pairs: dict[str, tuple[list[str], list[str]]], env: dict[str, str], runs: int, base: Path | None) -> None:
    """Each command alternating with its yardstick (and with ``base``'s tree running the same command)."""
    envs = {"this tree": env, **({"base": dict(env, PYTHONPATH=str(base))} if base else {})}
    cols = " | ".join(f"gpujob, {k}: wall | its CPU" for k in envs)
    print(f"| command | {cols} | sqlite3, the same rows: wall | its CPU |\n|---" + "|---|---" * (len(envs) + 1) + "|")
    m = statistics.median
    for label, (ours, theirs) in pairs.items():
        got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in [*envs, "sqlite3"]}
        for _ in range(runs):  # alternating: a load on the machine weighs on each alike
            for k, e in envs.items():
                got[k][0].append(timed(ours, e))
                got[k][1].append(CPU[-1])
            got["sqlite3"][0].append(timed(theirs, env))
            got["sqlite3"][1].append(CPU[-1])
        print(f"| `{label}` | " + " | ".join(f"{m(w) * 1000:.0f} ms | {m(c) * 1000:.0f} ms" for w, c in got.values()) + " |")


def startup(base: Path, env: dict[str, str], runs: int) -> None:
    print("\n| command | before the ledger: wall, CPU | with it: wall, CPU |\n|---|---|---|")
    for label, args in (("gpujob --help", ["--help"]), ("gpujob ls", ["ls", "--host", "local"]),
                        ("python3 -c pass", None)):
        got = {}
        for tree in (base, REPO):
            e = dict(env, PYTHONPATH=str(tree))
            cmd = [sys.executable, "-m", "gpujob.cli", *args] if args else [sys.executable, "-c", "pass"]
            timed(cmd, e)
            walls, cpus = [], []
            for _ in range(runs):  # alternating trees would be fairer; one tree's runs back to back keep it simple
                walls.append(timed(cmd, e))
                cpus.append(CPU[-1])
            got[tree] = f"{statistics.median(walls) * 1000:.0f} ms, {statistics.median(cpus) * 1000:.0f} ms"
        print(f"| `{label}` | {got[base]} | {got[REPO]} |")
    e = dict(env, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpujob.cli", "ls", "--host", "local"],
                       capture_output=True, text=True, env=e)
    print("optuna imported by ls:", "optuna" in r.stderr, "; sqlite3 imported by ls:", "sqlite3" in r.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--startup", type=Path, help="a checkout of the commit before the ledger")
    ap.add_argument("--against", type=Path, help="a checkout of an earlier tree: its runs and compare timed alongside")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gjledger"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUJOB_CONFIG_DIR=str(tmp / "cfg"), GPUJOB_STATE_DIR=str(tmp / "state"),
               GPUJOB_CACHE_DIR=str(tmp / "cache"), GPUJOB_LOCAL_ROOT=str(tmp / "root"), COLUMNS="160")
    os.environ.update({k: env[k] for k in ("GPUJOB_CONFIG_DIR", "GPUJOB_STATE_DIR", "GPUJOB_CACHE_DIR")})
    try:
        ids = fill(a.rows)
        db = str(tmp / "state" / "ledger.sqlite")
        gj = [sys.executable, "-m", "gpujob.cli"]
        cols = "job_id, name, host, state, submitted_at, params, final, best, cost, currency"
        three = ", ".join(f"'{i}'" for i in ids[-3:])
        print(f"{a.rows} runs; medians of {a.runs} fresh processes; load average before: "
              + " ".join(f"{x:.1f}" for x in os.getloadavg()) + "\n")
        timed(gj + ["runs"], env)  # bytecode written once
        bench({
            "runs": (gj + ["runs"], ["sqlite3", db, f"SELECT {cols} FROM runs ORDER BY submitted_at DESC LIMIT 50"]),
            "runs --json --limit 0": (gj + ["runs", "--json", "--limit", "0"],
                                      ["sqlite3", "-json", db, f"SELECT {cols} FROM runs ORDER BY submitted_at DESC"]),
            "runs --where 'lr<1e-3' --sort eval_loss": (
                gj + ["runs", "--where", "lr<1e-3", "--sort", "eval_loss"],
                ["sqlite3", db, f"SELECT {cols} FROM runs WHERE json_extract(params, '$.lr') < 1e-3 "
                 "ORDER BY json_extract(best, '$.eval_loss') LIMIT 50"]),
            "compare A B C": (gj + ["compare", *ids[-3:]], ["sqlite3", db, f"SELECT * FROM runs WHERE job_id IN ({three})"]),
            "python3 -c pass (the floor)": ([sys.executable, "-c", "pass"], ["sqlite3", ":memory:", "SELECT 1"]),
            "compare A B C --json": (gj + ["compare", *ids[-3:], "--json"],
                                     ["sqlite3", "-json", db, f"SELECT * FROM runs WHERE job_id IN ({three})"]),
        }, env, a.runs, a.against)
        print("\nload average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
        if a.startup:
            startup(a.startup, env, a.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
