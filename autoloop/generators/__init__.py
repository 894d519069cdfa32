"""Generator backends behind one small Protocol (`base`), selected from a plain registry
(`registry`): `command` and the agent CLIs (`agents`, `aider`), the SDK models (`anthropic_api`,
`openai_api`, `llm_common`, `edit_tool`), the offline search (`tune`, `tune_engine`), and what a
generator is told (`prompt`, `memory`).

May import: `isolation`, `journal`, `program`, `decide`, `git`, `disk`, `process`, `base`,
`errors`. Never the engine that drives them.
"""
