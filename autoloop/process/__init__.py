"""The one way a command runs (`proc`: own session, a timeout kills the tree, leftovers swept),
its limits and log files, the environments commands get, and what a command line starts.

May import: `base`, `errors`.
"""
