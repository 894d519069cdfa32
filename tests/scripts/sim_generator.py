"""A scripted generator for end-to-end tests: appends one line to work.py per cycle. The line is
SIM_EDIT (default a plain comment: a change that does nothing), with {n} the cycle number."""
import os

n = os.environ["AUTOLOOP_CYCLE"]
line = os.environ.get("SIM_EDIT", "# no-op edit {n}").replace("{n}", n)
with open("work.py", "a") as f:
    f.write(line + "\n")
print(f"Hypothesis: {line.lstrip('# ')}")
