"""Verifier for the leftover tests: on val.txt = escape (hang) or daemon (exit at once), it starts a
child that calls setsid and writes to $E2E_OUT/tick every 0.1 s, forever."""

import os
import subprocess
import sys
import time

v = open("val.txt").read().strip()
if v in ("escape", "daemon"):
    out = os.environ["E2E_OUT"]
    code = ("import os, time\n"
            "open(os.path.join(os.environ['E2E_OUT'], 'tick.pid'), 'w').write(str(os.getpid()))\n"
            "while True:\n"
            "    with open(os.path.join(os.environ['E2E_OUT'], 'tick'), 'a') as f:\n"
            "        f.write('x')\n"
            "    time.sleep(0.1)\n")
    subprocess.Popen(["setsid", sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(os.path.join(out, "tick.pid")):
        time.sleep(0.01)
    if v == "escape":
        time.sleep(300)
    print("score: 30")
    sys.exit(0)
print(f"score: {v}")
