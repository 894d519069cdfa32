"""A scripted generator for the end-to-end tests (generator kind `command`).

usage: python gen_plan.py PLAN.json RECORD_DIR

PLAN.json maps a cycle number (as a string) or "*" to Python source that is executed in the work
tree. Before running it, this script records what autoloop gave it (stdin, AUTOLOOP_* variables,
the prompt file) to RECORD_DIR/cycle-N-<ns>.json, so tests can check the protocol.

Names available to the plan's code: os, sys, time, json, random, subprocess, Path, cycle, W(path,
text), hyp(text), sh(cmd), common() (the git common dir), user() (the user's checkout), OUT (the
test's scratch dir, outside the repository).
"""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

plan = json.loads(Path(sys.argv[1]).read_text())
rec_dir = Path(sys.argv[2])
cycle = int(os.environ["AUTOLOOP_CYCLE"])
stdin = sys.stdin.read()
prompt_file = os.environ.get("AUTOLOOP_PROMPT_FILE", "")
try:
    prompt = Path(prompt_file).read_text()
except OSError:
    prompt = None
rec_dir.mkdir(parents=True, exist_ok=True)
record = {
    "cycle": cycle,
    "stdin": stdin,
    "prompt_file": prompt_file,
    "prompt": prompt,
    "env": {k: v for k, v in os.environ.items() if k.startswith("AUTOLOOP_")},
    "cwd": os.getcwd(),
    "pid": os.getpid(),
}
# Not the pid alone: sandboxed generators each get their own PID namespace, so two parallel
# workers can both be pid 3 and would share one temporary file.
tmp = rec_dir / f".tmp-{cycle}-{os.getpid()}-{time.time_ns()}-{random.getrandbits(32)}"
tmp.write_text(json.dumps(record))
os.replace(tmp, rec_dir / f"cycle-{cycle}-{time.time_ns()}.json")


def W(path, text):
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(str(text))


def hyp(text):
    Path(os.environ["AUTOLOOP_HYPOTHESIS_FILE"]).write_text(text)


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def common():
    out = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "rev-parse", "--git-common-dir"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out).resolve()


def user():
    return common().parent


OUT = Path(os.environ.get("E2E_OUT", "/nonexistent"))
code = plan.get(str(cycle), plan.get("*", ""))
exec(compile(code, f"<plan cycle {cycle}>", "exec"), {
    "os": os, "sys": sys, "time": time, "json": json, "random": random, "subprocess": subprocess,
    "Path": Path, "cycle": cycle, "W": W, "hyp": hyp, "sh": sh, "common": common, "user": user,
    "OUT": OUT,
})
