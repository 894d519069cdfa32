"""Pictures of what is on disk, inside the trees and outside them: snapshots of a work tree,
the `.git` sentinel, the watches of places outside the trees.

May import: `process`, `base`, `errors`.
"""
