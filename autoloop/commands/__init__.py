"""One module per command (and the views they print): `run`'s progress, `verify`, `doctor`,
`log`, `show`, `gate`, `report`, `clean`, `init`, `ci`. Only these and `autoloop.cli` print.

May import: everything below it (`engine` and down).
"""
