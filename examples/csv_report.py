#!/usr/bin/python3
"""Upload a CSV to a kennel session, clean it with pandas, plot it, download both.

    examples/csv_report.py IN.csv OUTDIR     # writes OUTDIR/clean.csv and OUTDIR/report.png

Cleaning: column names stripped and lower-cased, rows without a numeric `amount` dropped,
duplicate rows dropped, `date` parsed and sorted. The plot is the amount per month. Prints
one line per file written and the cell's summary. Run kenneld first (`make run`).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
from kennel_client import Session  # noqa: E402

CLEAN = """
import os
import pandas as pd
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt

os.makedirs("out", exist_ok=True)
df = pd.read_csv("in/raw.csv")
df.columns = [c.strip().lower() for c in df.columns]
rows_in = len(df)
df["amount"] = pd.to_numeric(df["amount"], errors="coerce")
df["date"] = pd.to_datetime(df["date"], errors="coerce")
df = df.dropna(subset=["amount", "date"]).drop_duplicates().sort_values("date")
df.to_csv("out/clean.csv", index=False, date_format="%Y-%m-%d")

monthly = df.groupby(df["date"].dt.to_period("M"))["amount"].sum()
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
monthly.plot.bar(ax=ax)
ax.set_ylabel("amount")
ax.set_title("amount per month")
fig.tight_layout()
fig.savefig("out/report.png")
plt.close(fig)
print(f"rows: {rows_in} in, {len(df)} clean; total {df['amount'].sum():.2f}")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="the CSV to clean (needs date and amount columns)")
    parser.add_argument("outdir", help="where clean.csv and report.png go")
    parser.add_argument("--state-dir", help="kenneld's state directory")
    args = parser.parse_args()
    with open(args.csv, "rb") as f:
        raw = f.read()
    os.makedirs(args.outdir, exist_ok=True)
    with Session(state_dir=args.state_dir) as s:  # a new session, ended at the end
        s.put("in/raw.csv", raw)
        ex = s.run(CLEAN, timeout=60)
        if not ex.ok:
            sys.stderr.write(ex.error.traceback if ex.error else ex.outcome)
            return 1
        made = {f.path for f in ex.files}
        for name in ("clean.csv", "report.png"):
            if f"out/{name}" not in made:
                sys.stderr.write(f"the cell did not write out/{name}\n")
                return 1
            out = os.path.join(args.outdir, name)
            with open(out, "wb") as f:
                f.write(s.get(f"out/{name}"))
            print(f"wrote {out}")
    sys.stdout.write(ex.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
