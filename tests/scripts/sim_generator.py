"""A scripted generator for end-to-end tests: appends one line to work.py per cycle. The line is
SIM_EDIT (default a plain comment: a change that does nothing), with {n} the cycle number; in the
cycles SIM_GAIN_CYCLES lists (comma-separated) it is `# GAIN {n}`, a real gain."""
import os

n = os.environ["AUTOLOOP_CYCLE"]
line = os.environ.get("SIM_EDIT", "# no-op edit {n}").replace("{n}", n)
if n in os.environ.get("SIM_GAIN_CYCLES", "").split(","):
    line = f"# GAIN {n}"
with open("work.py", "a") as f:
    f.write(line + "\n")
print(f"Hypothesis: {line.lstrip('# ')}")
