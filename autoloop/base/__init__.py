"""The bottom layer: the one walker of a tree (`walk`), the one number formatter (`numbers`)
and the values program.md is read into (`specs`).

May import: `autoloop.errors` only.
"""
