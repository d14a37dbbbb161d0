#!/usr/bin/python3
"""Train per-tier TPOT and TTFT models with XGBoost from a profile sweep.

Input: the CSV written by `routebalance profile` (one row per request, with
the dispatch-time features and the observed latencies). Output, per tier:
  OUT/<tier>.tpot.bin and OUT/<tier>.ttft.bin   XGBoost 1.7 legacy binary
  (reg:squarederror, features in the order of FEATURES below), which
  routing/latency loads with leaves.

Use Debian's xgboost (apt-get install -y python3-xgboost; 1.7.4) and call
/usr/bin/python3 explicitly: a pyenv python3 earlier on PATH lacks it.

  /usr/bin/python3 scripts/train_tpot.py --csv SWEEP.csv --tier gemma-2-9b-it@a30-24g --out models/
  /usr/bin/python3 scripts/train_tpot.py --synthetic 400 --seed 7 --tier test@cpu \
      --out routing/latency/testdata --check routing/latency/testdata/check.json

--holdout-every N keeps every N-th successful row (0-based index i with
i % N == N-1) out of training and prints the MAPE on them; `routebalance
profile eval --holdout-every N` holds out the same rows. --check writes
feature rows and the predictions xgboost made for them, so a Go test can
verify that leaves predicts the same values.
"""
import argparse
import csv
import json
import random
import sys

import numpy as np
import xgboost as xgb

FEATURES = ["running", "waiting", "kv_usage", "pending_decode_tokens", "prompt_tokens"]


def synthetic(n, seed):
    """A toy tier shaped like the emulator: tpot grows linearly with the
    batch, ttft with the prompt and the queue. For the committed test model
    only."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        run = rng.randint(0, 64)
        wait = rng.randint(0, 8) if run >= 60 else 0
        kv = min(1.0, run / 64 * rng.uniform(0.5, 1.0))
        pend = run * rng.uniform(20, 300)
        prompt = rng.randint(20, 2000)
        tpot = 0.025 * (1 + run / 64) * rng.uniform(0.97, 1.03)
        ttft = 0.04 + 0.06 * prompt / 1000 + 0.3 * wait + rng.uniform(0, 0.01)
        rows.append({"running": run, "waiting": wait, "kv_usage": kv,
                     "pending_decode_tokens": pend, "prompt_tokens": prompt,
                     "tpot_s": tpot, "ttft_s": ttft})
    return rows


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    for col in FEATURES + ["tpot_s", "ttft_s"]:
        if col not in rows[0]:
            sys.exit(f"{path}: missing column {col}")
    return [r for r in rows if not r.get("error")]


def split(rows, every):
    train, test = [], []
    for i, r in enumerate(rows):
        (test if i % every == every - 1 else train).append(r)
    return train, test


def matrix(rows):
    return np.array([[float(r[c]) for c in FEATURES] for r in rows], dtype=np.float32)


def fit(rows, target, args):
    y = np.array([float(r[target]) for r in rows], dtype=np.float32)
    keep = y > 0
    x = matrix(rows)[keep]
    d = xgb.DMatrix(x[:, :], label=y[keep], feature_names=FEATURES)
    params = {"objective": "reg:squarederror", "max_depth": args.depth, "eta": args.eta,
              "subsample": 1.0, "seed": args.seed, "nthread": 1, "base_score": float(np.median(y[keep]))}
    return xgb.train(params, d, num_boost_round=args.trees)


def mape(model, rows, target):
    y = np.array([float(r[target]) for r in rows])
    keep = y > 0
    if keep.sum() == 0:
        return float("nan")
    p = model.predict(xgb.DMatrix(matrix(rows)[keep], feature_names=FEATURES))
    return float(np.mean(np.abs(p - y[keep]) / y[keep]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", help="sweep CSV from routebalance profile")
    ap.add_argument("--synthetic", type=int, default=0, help="train on N synthetic rows instead")
    ap.add_argument("--tier", required=True, help="tier name model@gpu (file name prefix)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--eta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--holdout-every", type=int, default=0, help="hold out every N-th row for MAPE (0: none)")
    ap.add_argument("--check", help="write check rows and xgboost predictions to this JSON file")
    args = ap.parse_args()
    if bool(args.csv) == bool(args.synthetic):
        sys.exit("give exactly one of --csv and --synthetic")
    rows = synthetic(args.synthetic, args.seed) if args.synthetic else read_csv(args.csv)
    train, test = split(rows, args.holdout_every) if args.holdout_every >= 2 else (rows, [])
    out = {}
    for target, name in (("tpot_s", "tpot"), ("ttft_s", "ttft")):
        model = fit(train, target, args)
        path = f"{args.out}/{args.tier}.{name}.bin"
        model.save_model(path)  # .bin: XGBoost 1.7's legacy binary format
        out[name] = model
        msg = f"{name}: {len(train)} rows, {args.trees} trees of depth {args.depth} -> {path}"
        if test:
            msg += f"; held-out MAPE {mape(model, test, target):.4f} on {len(test)} rows"
        print(msg)
    if args.check:
        probe = rows[:16]
        x = matrix(probe)
        check = {"features": FEATURES, "rows": x.astype(float).tolist()}
        for name, model in out.items():
            check[name] = [float(v) for v in model.predict(xgb.DMatrix(x, feature_names=FEATURES))]
        with open(args.check, "w") as f:
            json.dump(check, f, indent=1)
        print(f"check values -> {args.check}")


if __name__ == "__main__":
    main()
