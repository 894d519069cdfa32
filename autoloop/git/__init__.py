"""The only code that runs git: the runner with its frozen environment, the run branch and
private worktrees, the candidate's tree and commit written by autoloop, the tag's refs that keep
every cycle's change, the proof a tree holds a commit, git's own integrity.

May import: `disk`, `process`, `base`, `errors`.
"""
