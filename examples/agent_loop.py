#!/usr/bin/python3
"""An agent's generate -> execute -> observe -> retry loop on a kennel session.

The "model" is a scripted stand-in: its first answer has a bug (a KeyError), and when it is
shown that cell's clean traceback it answers with a fix. The loop stops at the first cell
that runs, after at most 3 retries, or when its total wall-time budget is spent, and
returns the answer with its evidence: every attempt's code, outcome, error and metrics.

    examples/agent_loop.py                    # prints the answer and the attempts as JSON
    examples/agent_loop.py --state-dir DIR    # another kenneld's state directory
    examples/agent_loop.py --never-fix        # the model never learns: 4 tries, exit 1

Run kenneld first (`make run`). Uses clients/python (docs/sdk.md).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
from kennel_client import Session  # noqa: E402

TASK = "What is the mean price of the fruit in the basket, to two decimals?"
SETUP = "basket = [{'name': 'apple', 'price': 1.25}, {'name': 'pear', 'price': 2.0}]"


class ScriptedModel:
    """Stands in for an LLM: the same two answers every time, the second after an error."""

    ANSWERS = [
        # The bug: the key is 'price', not 'cost'.
        "round(sum(item['cost'] for item in basket) / len(basket), 2)",
        "round(sum(item['price'] for item in basket) / len(basket), 2)",
    ]

    def __init__(self, learns=True):
        self.calls = 0
        self.learns = learns  # False: it repeats its bug (to show the retry limit)

    def generate(self, task, feedback):
        """Code for task; feedback is the last failed attempt's traceback (None at first)."""
        answer = self.ANSWERS[min(self.calls, len(self.ANSWERS) - 1) if self.learns else 0]
        self.calls += 1
        return answer


def solve(session, model, task, max_retries=3, budget_s=60.0):
    """Run the loop. Returns {"answer", "ok", "stopped", "attempts": [...], "elapsed_s"};
    stopped says why the loop ended: "answered", "retries" (all spent) or "budget"."""
    start = time.monotonic()
    attempts, feedback = [], None
    stopped = "retries"
    for _ in range(1 + max_retries):
        left = budget_s - (time.monotonic() - start)
        if left <= 0:
            stopped = "budget"
            break
        code = model.generate(task, feedback)
        ex = session.run(code, timeout=max(left, 0.1))  # a cell never outlives the budget
        attempts.append({"code": code, "outcome": ex.outcome, "result": ex.text,
                         "error": ex.error and f"{ex.error.name}: {ex.error.value}",
                         "wall_ms": ex.metrics.get("wall_ms")})
        if ex.ok:
            return {"answer": ex.text, "ok": True, "stopped": "answered", "attempts": attempts,
                    "elapsed_s": round(time.monotonic() - start, 3)}
        if ex.outcome == "timeout":  # the cell ran into what was left of the budget
            stopped = "budget"
            break
        feedback = ex.error.traceback if ex.error else ex.outcome
    return {"answer": None, "ok": False, "stopped": stopped, "attempts": attempts,
            "elapsed_s": round(time.monotonic() - start, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", help="kenneld's state directory")
    parser.add_argument("--budget", type=float, default=60, help="total wall seconds")
    parser.add_argument("--retries", type=int, default=3, help="retries after the first try")
    parser.add_argument("--never-fix", action="store_true",
                        help="the model repeats its bug: the loop gives up after its retries")
    args = parser.parse_args()
    with Session(state_dir=args.state_dir) as s:  # a new session, ended at the end
        setup = s.run(SETUP)
        if not setup.ok:
            raise SystemExit(f"setup failed: {setup.error}")
        result = solve(s, ScriptedModel(not args.never_fix), TASK, args.retries, args.budget)
    print(json.dumps({"task": TASK, **result}, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
