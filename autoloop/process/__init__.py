"""The one way a command runs (`proc`: own session, a timeout kills the tree; `line`: what a
wrapper such as the sandbox makes of a command), what it leaves behind found and killed
(`leftovers`: the marker scan and the subreaper), the commands running now and autoloop's own
short ones (`running`), its limits and log files, the environments commands get, and what a
command line starts.

May import: `base`, `errors`.
"""
