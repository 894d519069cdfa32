"""Run a command, then print its exit code and the peak RSS (KiB) of its whole process tree as JSON
on the last line of stdout (resource.getrusage(RUSAGE_CHILDREN): the largest waited-for
descendant)."""

import json
import resource
import subprocess
import sys

res = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)
sys.stderr.buffer.write(res.stderr)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": res.returncode, "maxrss_kb": peak}))
