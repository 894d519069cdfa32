"""program.md → a frozen `Program`: one table of keys (`schema`), file:line errors with
did-you-mean (`frontmatter`), path globs and the scope rules, the reader (`reader`).

May import: `decide`, `git`, `disk`, `process`, `base`, `errors`. Never `generators`.
"""
