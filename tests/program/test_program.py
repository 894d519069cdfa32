"""program.md parsing: every key shape, every refusal with its exact one-line message."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from autoloop.errors import ConfigError, RepoStateError, UsageError
from autoloop.program.globs import PathRules
from autoloop.generators.registry import BACKENDS
from autoloop.program.reader import (GENERATOR_KINDS as KINDS, GuardSpec, PriceSpec, Program, StopSpec, guard_name, known_keys,
                              load_program, parse_program)


ROOT = Path(__file__).resolve().parents[2]
REPO = Path("/repo")

# Lines 1-7; `extra` text starts on line 8 (indent it two spaces to continue `verifier`).
HEAD = """\
---
goal: Lower the loss
allowed: [train.py]
verifier:
  command: python eval.py
  metric: val_loss
  direction: minimize
"""


def prog(extra: str = "") -> str:
    if extra and not extra.endswith("\n"):
        extra += "\n"
    return HEAD + extra + "---\nBody\n"


def parse(text: str | bytes, name: str = "program.md") -> Program:
    return parse_program(text, REPO / name, REPO)


def error(text: str | bytes, name: str = "program.md") -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, name)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Valid shapes

# (extra lines after HEAD, what to read from the Program, expected value)
VALID: list[tuple[str, Callable[[Program], Any], Any]] = [
    # verifier
    ("", lambda p: p.verifier.timeout, 600.0),
    ("  timeout: 30", lambda p: p.verifier.timeout, 30.0),
    ("  timeout: 2.5", lambda p: p.verifier.timeout, 2.5),
    ("  timeout:", lambda p: p.verifier.timeout, 600.0),          # empty = default
    ("", lambda p: p.verifier.metric, "val_loss"),
    ("", lambda p: p.verifier.pattern, None),
    ("", lambda p: p.verifier.direction, "minimize"),
    ("", lambda p: p.verifier.command, "python eval.py"),
    ("", lambda p: p.verifier.label, "val_loss"),
    # forbidden
    ("", lambda p: p.forbidden, ()),
    ("forbidden: [a.py, 'b/**']", lambda p: p.forbidden, ("a.py", "b/**")),
    ("forbidden: 'model/vendor/**'", lambda p: p.forbidden, ("model/vendor/**",)),
    ("forbidden: []", lambda p: p.forbidden, ()),
    ("forbidden:", lambda p: p.forbidden, ()),
    ("forbidden: ['.*', '**/.env']", lambda p: p.forbidden, (".*", "**/.env")),
    # guards
    ("", lambda p: p.guards, ()),
    ("guards:", lambda p: p.guards, ()),
    ("guards: []", lambda p: p.guards, ()),
    ("guards:\n  - python -m pytest -q", lambda p: p.guards,
     (GuardSpec("pytest", "python -m pytest -q", 600.0),)),
    ("guards:\n  - {name: lint, command: ruff check ., timeout: 120}", lambda p: p.guards,
     (GuardSpec("lint", "ruff check .", 120.0),)),
    ("guards:\n  - name: lint\n    command: ruff check .", lambda p: p.guards,
     (GuardSpec("lint", "ruff check .", 600.0),)),
    ("guards:\n  - {command: ruff check .}", lambda p: p.guards[0].name, "ruff-check"),
    ("guards:\n  - make test\n  - make test", lambda p: [g.name for g in p.guards],
     ["make-test", "make-test-2"]),
    ("guards:\n  - ruff check .\n  - {name: ruff-check, command: x}",
     lambda p: [g.name for g in p.guards], ["ruff-check-2", "ruff-check"]),
    ("guards:\n  - {name: A.b_c-1, command: x}", lambda p: p.guards[0].name, "A.b_c-1"),
    ("guards:\n  - |\n    set -e\n    make test", lambda p: p.guards[0].command,
     "set -e\nmake test"),
    # generator
    ("", lambda p: p.generator.kind, "claude"),
    ("", lambda p: p.generator.timeout, 1800.0),
    ("", lambda p: p.generator.max_turns, 30),
    ("", lambda p: p.generator.max_tokens, 8192),
    ("", lambda p: p.generator.args, ()),
    ("", lambda p: (p.generator.command, p.generator.model, p.generator.base_url,
                    p.generator.price, p.generator.seed), (None,) * 5),
    ("generator:", lambda p: p.generator.kind, "claude"),
    ("generator: {kind: command, command: ./agent.sh}", lambda p: p.generator.command,
     "./agent.sh"),
    ("generator: {command: ./agent.sh}", lambda p: p.generator.kind, "command"),
    ("generator: {kind: claude, command: /opt/claude}", lambda p: p.generator.kind, "claude"),
    ("generator: {timeout: 60}", lambda p: p.generator.timeout, 60.0),
    ("generator: {timeout: 0.5}", lambda p: p.generator.timeout, 0.5),
    ("generator: {args: [--verbose, -x]}", lambda p: p.generator.args, ("--verbose", "-x")),
    ("generator: {args: --verbose -x}", lambda p: p.generator.args, ("--verbose", "-x")),
    ("generator: {args: \"--msg 'two words'\"}", lambda p: p.generator.args,
     ("--msg", "two words")),
    ("generator: {args: []}", lambda p: p.generator.args, ()),
    ("generator: {model: gpt-4o-mini}", lambda p: p.generator.model, "gpt-4o-mini"),
    ("generator: {base_url: 'http://127.0.0.1:8000/v1'}", lambda p: p.generator.base_url,
     "http://127.0.0.1:8000/v1"),
    ("generator: {base_url: 'https://api.example.com'}", lambda p: p.generator.base_url,
     "https://api.example.com"),
    ("generator: {max_turns: 1}", lambda p: p.generator.max_turns, 1),
    ("generator: {max_tokens: 100}", lambda p: p.generator.max_tokens, 100),
    ("generator: {price: {input: 3, output: 15}}", lambda p: p.generator.price,
     PriceSpec(3.0, 15.0)),
    ("generator: {price: {input: 0, output: 0.25}}", lambda p: p.generator.price,
     PriceSpec(0.0, 0.25)),
    ("generator: {seed: 0}", lambda p: p.generator.seed, 0),
    ("generator: {seed: -7}", lambda p: p.generator.seed, -7),
    # stop
    ("", lambda p: p.stop, StopSpec()),
    ("stop:", lambda p: p.stop, StopSpec()),
    ("stop: {max_cycles: 0}", lambda p: p.stop.max_cycles, 0),
    ("stop: {max_cycles: 100}", lambda p: p.stop.max_cycles, 100),
    ("stop: {max_minutes: 480}", lambda p: p.stop.max_minutes, 480.0),
    ("stop: {max_minutes: 0.5}", lambda p: p.stop.max_minutes, 0.5),
    ("stop: {patience: 1}", lambda p: p.stop.patience, 1),
    ("stop: {target: 0.95}", lambda p: p.stop.target, 0.95),
    ("stop: {target: -3}", lambda p: p.stop.target, -3.0),
    ("stop: {target: 0}", lambda p: p.stop.target, 0.0),
    ("stop: {max_cost_usd: 25}", lambda p: p.stop.max_cost_usd, 25.0),
    # the body
    ("", lambda p: p.body, "Body\n"),
]


@pytest.mark.parametrize(("extra", "read", "expected"), VALID)
def test_valid_shapes(extra: str, read: Callable[[Program], Any], expected: Any) -> None:
    assert read(parse(prog(extra))) == expected


@pytest.mark.parametrize("extra", ["  timeout: 30", "generator: {timeout: 60}",
                                   "stop: {max_minutes: 5, target: 1}",
                                   "guards:\n  - {name: a, command: x, timeout: 9}"])
def test_numbers_meant_as_floats_are_floats(extra: str) -> None:
    p = parse(prog(extra))
    values = [p.verifier.timeout, p.generator.timeout, p.stop.max_minutes, p.stop.target,
              *(g.timeout for g in p.guards)]
    assert all(isinstance(v, float) for v in values if v is not None)


def test_program_md_accepts_exactly_the_registered_kinds() -> None:
    # program.md's reader keeps its own list (it must not import the generators): it must agree
    assert sorted(KINDS) == sorted(BACKENDS)


@pytest.mark.parametrize("kind", KINDS)
def test_every_registered_kind_is_accepted(kind: str) -> None:
    extra = f"generator: {{kind: {kind}, command: x}}"
    assert parse(prog(extra)).generator.kind == kind


# Programs that differ from HEAD in the lines HEAD fixes.
VALID_DOCS: list[tuple[str, Callable[[Program], Any], Any]] = [
    ("---\ngoal: g\nallowed: train.py\nverifier: {command: c, metric: m, direction: maximize}"
     "\n---\n", lambda p: p.allowed, ("train.py",)),
    ("---\ngoal: g\nallowed:\n  - a.py\n  - 'b/**'\n  - c\n"
     "verifier: {command: c, metric: m, direction: maximize}\n---\n",
     lambda p: p.allowed, ("a.py", "b/**", "c")),
    ("---\ngoal: g\nallowed: [a]\nverifier: {command: c, metric: m, direction: maximize}\n---\n",
     lambda p: p.verifier.direction, "maximize"),
    ("---\ngoal: g\nallowed: [a]\nverifier: {command: c, pattern: 'acc=([0-9.]+)', "
     "direction: maximize}\n---\n",
     lambda p: (p.verifier.metric, p.verifier.pattern), (None, "acc=([0-9.]+)")),
    ("---\ngoal: g\nallowed: [a]\nverifier: {command: c, pattern: 'acc=([0-9.]+)', "
     "direction: maximize}\n---\n", lambda p: p.verifier.label, "metric"),
    ("---\ngoal: >\n  Lower the loss\nallowed: [a]\n"
     "verifier: {command: c, metric: m, direction: minimize}\n---\n",
     lambda p: p.goal, "Lower the loss"),
    ("---\ngoal: A long goal\n  folded by YAML\nallowed: [a]\n"
     "verifier: {command: c, metric: m, direction: minimize}\n---\n",
     lambda p: p.goal, "A long goal folded by YAML"),
    ("---\ngoal: '  padded  '\nallowed: [a]\n"
     "verifier: {command: c, metric: m, direction: minimize}\n---\n", lambda p: p.goal, "padded"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  command: |\n    cd eval\n    python run.py\n"
     "  metric: m\n  direction: minimize\n---\n",
     lambda p: p.verifier.command, "cd eval\npython run.py"),
]


@pytest.mark.parametrize("metric", ["val_loss", "val.bpb", "top-1", "ACC", "m2", "_x"])
def test_metric_names(metric: str) -> None:
    text = prog().replace("metric: val_loss", f"metric: {metric}")
    assert parse(text).verifier.metric == metric


@pytest.mark.parametrize(("text", "read", "expected"), VALID_DOCS)
def test_valid_documents(text: str, read: Callable[[Program], Any], expected: Any) -> None:
    assert read(parse(text)) == expected


# ---------------------------------------------------------------------------------------------
# Front matter and body

BODY_CASES = [
    (HEAD + "---\nBody\n", "Body\n"),
    (HEAD + "---\n\nAfter a blank line\n", "\nAfter a blank line\n"),
    (HEAD + "---", ""),
    (HEAD + "---\n", ""),
    (HEAD + "---\nText\n---\nmore\n", "Text\n---\nmore\n"),   # later --- lines are body
    (HEAD + "---   \nBody\n", "Body\n"),                      # trailing spaces on the closer
    (HEAD.replace("\n", "\r\n") + "---\r\nBody\r\n", "Body\r\n"),
]


@pytest.mark.parametrize(("text", "body"), BODY_CASES)
def test_body(text: str, body: str) -> None:
    assert parse(text).body == body


def test_crlf_front_matter_is_read() -> None:
    assert parse(prog().replace("\n", "\r\n")).verifier.direction == "minimize"


def test_bom_is_not_content() -> None:
    assert parse(b"\xef\xbb\xbf" + prog().encode()).goal == "Lower the loss"


def test_source_is_the_exact_bytes() -> None:
    raw = prog("# caf\xe9 comment").encode() + b"\r\n"
    assert parse(raw).source == raw


def test_source_of_text_is_its_utf8() -> None:
    text = prog("# caf\xe9")
    assert parse(text).source == text.encode("utf-8")


def test_path_and_root_are_kept() -> None:
    p = parse_program(prog(), REPO / "exp" / "program.md", REPO)
    assert (p.path, p.repo_root, p.rel_path) == (REPO / "exp" / "program.md", REPO,
                                                 "exp/program.md")


def test_program_outside_its_repo_is_refused() -> None:
    with pytest.raises(UsageError, match="not inside the repository"):
        parse_program(prog(), Path("/elsewhere/program.md"), REPO)


LINES = {
    "goal": 2, "allowed": 3, "allowed[0]": 3, "verifier": 4, "verifier.command": 5,
    "verifier.metric": 6, "verifier.direction": 7, "guards": 8, "guards[0]": 9,
    "guards[1]": 10, "guards[1].name": 10, "guards[1].command": 11, "generator": 12,
    "generator.kind": 13, "generator.price": 14, "generator.price.input": 14,
    "generator.price.output": 14, "generator.args": 15, "generator.args[0]": 15,
}


def test_lines_name_every_key_seen() -> None:
    extra = ("guards:\n  - make test\n  - name: lint\n    command: ruff .\n"
             "generator:\n  kind: claude\n  price: {input: 1, output: 2}\n  args: [-v]")
    assert dict(parse(prog(extra)).lines) == LINES


def test_lines_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        parse(prog()).lines["goal"] = 99  # type: ignore[index]


# ---------------------------------------------------------------------------------------------
# Refusals: (text, exact message)

BAD_UTF8 = b"---\ngoal: g\nallowed: [caf\xe9]\n---\n"

FILE_ERRORS = [
    ("", "program.md:1: the file is empty; it needs YAML front matter between two '---' lines "
         "(goal, allowed, verifier)"),
    ("  \n\n", "program.md:1: the file is empty; it needs YAML front matter between two '---' "
               "lines (goal, allowed, verifier)"),
    ("goal: g\n", "program.md:1: no front matter: the first line must be '---'; the file needs "
                  "YAML front matter between two '---' lines (goal, allowed, verifier)"),
    ("\n---\ngoal: g\n---\n", "program.md:1: no front matter: the first line must be '---'; the "
                              "file needs YAML front matter between two '---' lines (goal, "
                              "allowed, verifier)"),
    ("# Title\n", "program.md:1: no front matter: the first line must be '---'; the file needs "
                  "YAML front matter between two '---' lines (goal, allowed, verifier)"),
    ("---\ngoal: g\n", "program.md:1: the front matter is never closed: no '---' line after the "
                       "first one"),
    ("---", "program.md:1: the front matter is never closed: no '---' line after the first one"),
    ("---\n---\nbody\n", "program.md:1: the front matter is empty; it needs the keys goal, "
                         "allowed, verifier"),
    ("---\n# just a comment\n---\n", "program.md:1: the front matter is empty; it needs the "
                                     "keys goal, allowed, verifier"),
    (BAD_UTF8, "program.md:3: not valid UTF-8 (byte 0xe9); save the file as UTF-8"),
    ("---\n- a\n- b\n---\n", "program.md:2: the front matter must be a mapping of keys (goal: "
                             "..., allowed: ..., verifier: ...), got a list"),
    ("---\njust words\n---\n", "program.md:2: the front matter must be a mapping of keys "
                               "(goal: ..., allowed: ..., verifier: ...), got 'just words'"),
]


@pytest.mark.parametrize(("text", "message"), FILE_ERRORS)
def test_file_errors(text: str | bytes, message: str) -> None:
    assert error(text) == message


YAML_ERRORS = [
    ("---\ngoal: a: b\n---\n", "program.md:2: the value contains ': ', which YAML reads as a new key: "
     "quote the whole value, e.g. goal: 'a: b' (YAML: mapping values are not allowed here)"),
    ("---\ngoal: g\nallowed: [*.py]\n---\n", "program.md:3: '*.py' must be quoted: YAML reads a value "
     "starting with '*' as a reference; write \"*.py\" (YAML: expected alphabetic or numeric character, "
     "but found '.' (while scanning an alias))"),
    (HEAD + "  command: echo score: 5\n---\n", "program.md:8: the value contains ': ', which YAML reads as "
     "a new key: quote the whole value, e.g. command: 'echo score: 5' (YAML: mapping values are not "
     "allowed here)"),
    ("---\ngoal: g\nallowed: [a\n---\n",
     "program.md:3: invalid YAML: expected ',' or ']', but got '<stream end>' "
     "(while parsing a flow sequence)"),
    (HEAD + "\tx: 1\n---\n",
     "program.md:8: a tab: YAML indents with spaces only; replace the tab with spaces (YAML: found "
     "character '\\t' that cannot start any token (while scanning for the next token))"),
    ("---\ngoal: g\nallowed: \x07\n---\n",
     "program.md:3: invalid YAML: special characters are not allowed ('\\x07')"),
    (HEAD + "x: *nope\n---\n", "program.md:8: '*nope' must be quoted: YAML reads a value starting with "
     "'*' as a reference; write \"*nope\" (YAML: found undefined alias 'nope')"),
    (HEAD + "  timeout: !seconds 5\n---\n",
     "program.md:8: invalid YAML: could not determine a constructor for the tag '!seconds'"),
    # an unclosed '[' is found where the parser gives up; the line it opened on is named too
    ("---\ngoal: [Make it fast\n\nallowed: [a.py]\n---\n",
     "program.md:4: invalid YAML: expected ',' or ']', but got ':' "
     "(while parsing a flow sequence that starts at line 2)"),
    ("---\ngoal: \"unclosed\n---\n",
     "program.md:2: invalid YAML: found unexpected end of stream "
     "(while scanning a quoted scalar)"),
    # a newcomer's slips: an over-indented key is not a value to quote, `key:value` lacks a space
    ("---\ngoal: g\nallowed: [a.py]\nverifier:\n  command: python3 b.py\n    metric: seconds\n---\n",
     "program.md:6: 'metric' is indented too far: YAML reads it as part of the value of 'command' on "
     "line 5; start it in the same column as 'command' (YAML: mapping values are not allowed here)"),
    ("---\ngoal: g\n  allowed: [a.py]\n---\n",
     "program.md:3: 'allowed' is indented too far: YAML reads it as part of the value of 'goal' on "
     "line 2; start it in the same column as 'goal' (YAML: mapping values are not allowed here)"),
    ("---\ngoal: g\nallowed: [a.py]\nverifier:\n  command: python3 b.py\n  metric:seconds\n"
     "  direction: minimize\n---\n",
     "program.md:6: a space is needed after the colon of 'metric': write 'metric: seconds' "
     "(YAML: could not find expected ':' (while scanning a simple key))"),
]


@pytest.mark.parametrize(("text", "message"), YAML_ERRORS)
def test_yaml_errors(text: str, message: str) -> None:
    assert error(text) == message


STRUCTURE_ERRORS = [
    ("goal: again", "program.md:8: duplicate key 'goal' (first on line 2)"),
    ("  metric: other", "program.md:8: duplicate key 'verifier.metric' (first on line 6)"),
    ("stop:\n  patience: 3\n  patience: 4", "program.md:10: duplicate key 'stop.patience' "
                                            "(first on line 9)"),
    ("guards:\n  - {name: a, command: x, command: y}",
     "program.md:9: duplicate key 'guards[0].command' (first on line 9)"),
    ("  <<: {timeout: 3}", "program.md:8: YAML merge keys ('<<') are not supported in program "
                           "files"),
    ("? [a, b]\n: c", "program.md:8: front matter: keys must be plain names"),
    ("stop:\n  ? [a]\n  : 1", "program.md:9: stop: keys must be plain names"),
]


@pytest.mark.parametrize(("extra", "message"), STRUCTURE_ERRORS)
def test_structure_errors(extra: str, message: str) -> None:
    assert error(prog(extra)) == message


UNKNOWN_KEYS = [
    ("verifer: x", "program.md:8: unknown key 'verifer' (did you mean 'verifier'?)"),
    ("  timout: 3", "program.md:8: unknown key 'verifier.timout' (did you mean "
                    "'verifier.timeout'?)"),
    ("  metrics: m", "program.md:8: unknown key 'verifier.metrics' (did you mean "
                     "'verifier.metric'?)"),
    ("forbiden: [a]", "program.md:8: unknown key 'forbiden' (did you mean 'forbidden'?)"),
    ("guard: [x]", "program.md:8: unknown key 'guard' (did you mean 'guards'?)"),
    ("metric: x", "program.md:8: unknown key 'metric' (did you mean 'verifier.metric'?)"),
    ("max_cycles: 3", "program.md:8: unknown key 'max_cycles' (did you mean "
                      "'stop.max_cycles'?)"),
    ("zzz: 1", "program.md:8: unknown key 'zzz' (known keys: goal, allowed, forbidden, "
               "verifier, guards, generator, stop, accept, limits, holdout, sandbox, resources, data, "
               "parallel, private)"),
    ("on: 1", "program.md:8: unknown key 'on' (known keys: goal, allowed, forbidden, verifier, "
              "guards, generator, stop, accept, limits, holdout, sandbox, resources, data, parallel, private)"),
    ("  zzz: 1", "program.md:8: unknown key 'verifier.zzz' (known keys under verifier: command, "
                 "metric, pattern, direction, timeout, repeats, network, hosts, measure, score, inputs)"),
    ("generator:\n  modle: x", "program.md:9: unknown key 'generator.modle' (did you mean "
                               "'generator.model'?)"),
    ("generator:\n  price: {input: 1, ouput: 2}",
     "program.md:9: unknown key 'generator.price.ouput' (did you mean 'generator.price.output'?)"),
    ("guards:\n  - {comand: x}", "program.md:9: unknown key 'guards[0].comand' (did you mean "
                                 "'guards[0].command'?)"),
    ("guards:\n  - ok\n  - name: x\n    comand: y",
     "program.md:11: unknown key 'guards[1].comand' (did you mean 'guards[1].command'?)"),
    ("stop:\n  patiense: 3", "program.md:9: unknown key 'stop.patiense' (did you mean "
                             "'stop.patience'?)"),
    ("Goal: again", "program.md:8: unknown key 'Goal' (did you mean 'goal'?)"),
    ("stop:\n  max_cost: 3", "program.md:9: unknown key 'stop.max_cost' (did you mean "
                             "'stop.max_cost_usd'?)"),
]


@pytest.mark.parametrize(("extra", "message"), UNKNOWN_KEYS)
def test_unknown_keys(extra: str, message: str) -> None:
    assert error(prog(extra)) == message


VERIFIER_REST = "  command: c\n  metric: m\n  direction: minimize\n"

MISSING_KEYS = [
    ("---\nallowed: [a]\nverifier: {command: c, metric: m, direction: minimize}\n---\n",
     "program.md:1: missing required key 'goal'"),
    ("---\ngoal: g\nverifier: {command: c, metric: m, direction: minimize}\n---\n",
     "program.md:1: missing required key 'allowed'"),
    ("---\ngoal: g\nallowed: [a]\n---\n", "program.md:1: missing required key 'verifier'"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  metric: m\n  direction: minimize\n---\n",
     "program.md:4: missing required key 'verifier.command'"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  command: c\n  metric: m\n---\n",
     "program.md:4: missing required key 'verifier.direction'"),
    ("---\ngoal: g\nallowed: [a]\nverifier: {}\n---\n",
     "program.md:4: missing required key 'verifier.command'"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  command: c\n  direction: minimize\n---\n",
     "program.md:4: verifier: needs metric (the metric's name, e.g. val_loss) or pattern "
     "(a regex whose first group is the number)"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  command: c\n  metric: m\n  pattern: '(x)'\n"
     "  direction: minimize\n---\n", "program.md:7: verifier: give metric or pattern, not both"),
    ("---\ngoal: g\nallowed: [a]\nverifier:\n  pattern: '(x)'\n  command: c\n  metric: m\n"
     "  direction: minimize\n---\n", "program.md:7: verifier: give metric or pattern, not both"),
]


@pytest.mark.parametrize(("text", "message"), MISSING_KEYS)
def test_missing_and_conflicting_keys(text: str, message: str) -> None:
    assert error(text) == message


# (extra lines after HEAD, exact message)
VALUE_ERRORS = [
    # verifier
    ("  timeout: ten", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                       "got 'ten'"),
    ("  timeout: '600'", "program.md:8: verifier.timeout: expected a positive number of "
                         "seconds, got '600'"),
    ("  timeout: 0", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                     "got 0"),
    ("  timeout: -1.5", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                        "got -1.5"),
    ("  timeout: true", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                        "got true"),
    ("  timeout: .nan", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                        "got nan"),
    ("  timeout: .inf", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                        "got inf"),
    ("  timeout: [1]", "program.md:8: verifier.timeout: expected a positive number of seconds, "
                       "got a list"),
    ("  timeout: " + "9" * 400, "program.md:8: verifier.timeout: expected a positive number of "
                                "seconds, got " + "9" * 57 + "..."),
    ("  direction: minimise", "program.md:8: duplicate key 'verifier.direction' (first on "
                              "line 7)"),
    # guards
    ("guards: pytest", "program.md:8: guards: expected a list of commands, got 'pytest'"),
    ("guards: {a: b}", "program.md:8: guards: expected a list of commands, got a mapping"),
    ("guards:\n  - ''", "program.md:9: guards[0]: expected a non-empty string, got ''"),
    ("guards:\n  -", "program.md:9: guards[0]: expected a command or a mapping {name, command, "
                     "timeout}, got nothing"),
    ("guards:\n  - 5", "program.md:9: guards[0]: expected a command or a mapping {name, command, "
                       "timeout}, got 5"),
    ("guards:\n  - [a]", "program.md:9: guards[0]: expected a command or a mapping {name, "
                         "command, timeout}, got a list"),
    ("guards:\n  - {name: lint}", "program.md:9: missing required key 'guards[0].command'"),
    ("guards:\n  - {name: 'unit tests', command: x}",
     "program.md:9: guards[0].name: expected a name of letters, digits, '_', '.', '-', "
     "got 'unit tests'"),
    ("guards:\n  - {name: -x, command: x}", "program.md:9: guards[0].name: expected a name of "
                                            "letters, digits, '_', '.', '-', got '-x'"),
    ("guards:\n  - {name: 7, command: x}", "program.md:9: guards[0].name: expected a name of "
                                           "letters, digits, '_', '.', '-', got 7"),
    ("guards:\n  - {name: a, command: x}\n  - {name: a, command: y}",
     "program.md:10: guards[1].name: 'a' is already the name of the guard on line 9"),
    ("guards:\n  - {command: x, timeout: 0}", "program.md:9: guards[0].timeout: expected a "
                                              "positive number of seconds, got 0"),
    ("guards:\n  - {command: ''}", "program.md:9: guards[0].command: expected a non-empty "
                                   "string, got ''"),
    # generator
    ("generator: claude", "program.md:8: generator: expected a mapping of keys, got 'claude'"),
    ("generator: {kind: claud}", "program.md:8: generator.kind: 'claud' is not one of command, "
                                 "claude, codex, aider, anthropic, openai, tune (did you mean "
                                 "'claude'?)"),
    ("generator: {kind: OpenAI}", "program.md:8: generator.kind: 'OpenAI' is not one of command, "
                                  "claude, codex, aider, anthropic, openai, tune (did you mean "
                                  "'openai'?)"),
    ("generator: {kind: gpt}", "program.md:8: generator.kind: 'gpt' is not one of command, "
                               "claude, codex, aider, anthropic, openai, tune"),
    ("generator: {kind: 5}", "program.md:8: generator.kind: 5 is not one of command, claude, "
                             "codex, aider, anthropic, openai, tune"),
    ("generator:\n  kind: command", "program.md:9: generator.command: required when "
                                    "generator.kind is 'command'"),
    ("generator: {kind: command, command: '  '}", "program.md:8: generator.command: expected a "
                                                  "non-empty string, got '  '"),
    ("generator: {timeout: 0}", "program.md:8: generator.timeout: expected a positive number of "
                                "seconds, got 0"),
    ("generator: {timeout: 1h}", "program.md:8: generator.timeout: expected a positive number "
                                 "of seconds, got '1h'"),
    ("generator: {args: 5}", "program.md:8: generator.args: expected a list of strings, got 5"),
    ("generator: {args: {a: b}}", "program.md:8: generator.args: expected a list of strings, "
                                  "got a mapping"),
    ("generator:\n  args:\n    - -v\n    - 2", "program.md:11: generator.args[1]: expected a "
                                              "string, got 2"),
    ("generator: {args: \"'unclosed\"}", "program.md:8: generator.args: cannot split "
                                          "\"'unclosed\": No closing quotation"),
    ("generator: {model: ''}", "program.md:8: generator.model: expected a non-empty string, "
                               "got ''"),
    ("generator: {model: 4}", "program.md:8: generator.model: expected a non-empty string, "
                              "got 4"),
    ("generator: {base_url: 'localhost:8000'}",
     "program.md:8: generator.base_url: expected a URL starting with http:// or https://, "
     "got 'localhost:8000'"),
    ("generator: {base_url: 'ftp://x'}", "program.md:8: generator.base_url: expected a URL "
                                         "starting with http:// or https://, got 'ftp://x'"),
    ("generator: {base_url: 'http://'}", "program.md:8: generator.base_url: expected a URL "
                                         "starting with http:// or https://, got 'http://'"),
    ("generator: {max_turns: 0}", "program.md:8: generator.max_turns: expected a whole number "
                                  ">= 1, got 0"),
    ("generator: {max_turns: 1.5}", "program.md:8: generator.max_turns: expected a whole number "
                                    ">= 1, got 1.5"),
    ("generator: {max_turns: 30.0}", "program.md:8: generator.max_turns: expected a whole "
                                     "number >= 1, got 30.0"),
    ("generator: {max_turns: true}", "program.md:8: generator.max_turns: expected a whole "
                                     "number >= 1, got true"),
    ("generator: {max_turns: '3'}", "program.md:8: generator.max_turns: expected a whole number "
                                    ">= 1, got '3'"),
    ("generator: {max_tokens: -1}", "program.md:8: generator.max_tokens: expected a whole "
                                    "number >= 1, got -1"),
    ("generator: {price: 3}", "program.md:8: generator.price: expected a mapping of keys, got 3"),
    ("generator:\n  price: {input: 1}", "program.md:9: missing required key "
                                        "'generator.price.output'"),
    ("generator:\n  price: {input: -1, output: 1}",
     "program.md:9: generator.price.input: expected USD per million input tokens (>= 0), "
     "got -1"),
    ("generator:\n  price: {input: 1, output: free}",
     "program.md:9: generator.price.output: expected USD per million output tokens (>= 0), "
     "got 'free'"),
    ("generator: {seed: 1.5}", "program.md:8: generator.seed: expected a whole number, got 1.5"),
    ("generator: {seed: false}", "program.md:8: generator.seed: expected a whole number, "
                                 "got false"),
    # stop
    ("stop: 5", "program.md:8: stop: expected a mapping of keys, got 5"),
    ("stop: [max_cycles]", "program.md:8: stop: expected a mapping of keys, got a list"),
    ("stop: {max_cycles: -1}", "program.md:8: stop.max_cycles: expected a whole number >= 0, "
                               "got -1"),
    ("stop: {max_cycles: 10.0}", "program.md:8: stop.max_cycles: expected a whole number >= 0, "
                                 "got 10.0"),
    ("stop: {max_cycles: yes}", "program.md:8: stop.max_cycles: expected a whole number >= 0, "
                                "got true"),
    ("stop: {max_minutes: 0}", "program.md:8: stop.max_minutes: expected a positive number of "
                               "minutes, got 0"),
    ("stop: {patience: 0}", "program.md:8: stop.patience: expected a whole number >= 1, got 0"),
    ("stop: {target: high}", "program.md:8: stop.target: expected a number, got 'high'"),
    ("stop: {target: .inf}", "program.md:8: stop.target: expected a number, got inf"),
    ("stop: {target: true}", "program.md:8: stop.target: expected a number, got true"),
    ("stop: {max_cost_usd: 0}", "program.md:8: stop.max_cost_usd: expected a positive amount "
                                "of USD, got 0"),
    ("stop: {max_cost_usd: $5}", "program.md:8: stop.max_cost_usd: expected a positive amount "
                                 "of USD, got '$5'"),
    # forbidden
    ("forbidden: 5", "program.md:8: forbidden: expected a list of path patterns, got 5"),
    ("forbidden: ['/etc/x']", "program.md:8: forbidden: '/etc/x' is absolute; patterns are "
                              "relative to the repository root"),
    ("forbidden:\n  - ok\n  - '../x'", "program.md:10: forbidden: '../x' contains '..'; patterns "
                                       "cannot leave the repository"),
]


@pytest.mark.parametrize(("extra", "message"), VALUE_ERRORS)
def test_value_errors(extra: str, message: str) -> None:
    assert error(prog(extra)) == message


def doc(goal: str = "g", allowed: str = "[a]",
        verifier: str = "{command: c, metric: m, direction: minimize}") -> str:
    return f"---\ngoal: {goal}\nallowed: {allowed}\nverifier: {verifier}\n---\n"


TOP_ERRORS = [
    # goal
    (doc(goal=""), "program.md:2: goal: expected a non-empty string, got nothing"),
    (doc(goal="''"), "program.md:2: goal: expected a non-empty string, got ''"),
    (doc(goal="5"), "program.md:2: goal: expected a non-empty string, got 5"),
    (doc(goal="yes"), "program.md:2: goal: expected a non-empty string, got true"),
    (doc(goal="[a, b]"), "program.md:2: goal: expected a non-empty string, got a list"),
    (doc(goal="|\n  line one\n  line two"), "program.md:2: goal: must be one line"),
    (doc(goal='"one\\ntwo"'), "program.md:2: goal: must be one line"),
    # allowed
    (doc(allowed=""), "program.md:3: allowed: expected a list of path patterns, got nothing"),
    (doc(allowed="[]"), "program.md:3: allowed: must list at least one path pattern"),
    (doc(allowed="{a: 1}"), "program.md:3: allowed: expected a list of path patterns, "
                            "got a mapping"),
    (doc(allowed="5"), "program.md:3: allowed: expected a list of path patterns, got 5"),
    (doc(allowed="[5]"), "program.md:3: allowed: expected a path pattern, got 5"),
    (doc(allowed="[[a]]"), "program.md:3: allowed: expected a path pattern, got a list"),
    (doc(allowed="\n  - a.py\n  - ''"), "program.md:5: allowed: '' is empty"),
    (doc(allowed="['/etc/passwd']"), "program.md:3: allowed: '/etc/passwd' is absolute; "
                                     "patterns are relative to the repository root"),
    (doc(allowed="\n  - ok.py\n  - ../up.py"), "program.md:5: allowed: '../up.py' contains "
                                               "'..'; patterns cannot leave the repository"),
    (doc(allowed="['a/../b']"), "program.md:3: allowed: 'a/../b' contains '..'; patterns cannot "
                                "leave the repository"),
    (doc(allowed="['src\\a.py']"), "program.md:3: allowed: 'src\\\\a.py' contains a backslash; "
                                     "separate directories with '/'"),
    (doc(allowed="['./train.py']"), "program.md:3: allowed: './train.py' contains a '.' segment; "
                                    "write the path without './'"),
    (doc(allowed="['a//b']"), "program.md:3: allowed: 'a//b' has an empty path segment ('//')"),
    (doc(allowed="['[z-a]']"), "program.md:3: allowed: '[z-a]' is not a valid glob (bad "
                               "character range z-a at position 1)"),
    (doc(allowed="\n  - src/**\n  - .git/hooks/**"),
     "program.md:5: allowed: '.git/hooks/**' would match .git, which is never editable"),
    (doc(allowed=".git"), "program.md:3: allowed: '.git' would match .git, which is never "
                          "editable"),
    (doc(allowed="['.*']"), "program.md:3: allowed: '.*' would match .git, which is never "
                            "editable"),
    (doc(allowed="['**/.GIT/**']"), "program.md:3: allowed: '**/.GIT/**' would match .git, "
                                    "which is never editable"),
    # verifier
    (doc(verifier=""), "program.md:4: verifier: expected a mapping of keys, got nothing"),
    (doc(verifier="python eval.py"), "program.md:4: verifier: expected a mapping of keys, "
                                     "got 'python eval.py'"),
    (doc(verifier="{command: 5, metric: m, direction: minimize}"),
     "program.md:4: verifier.command: expected a non-empty string, got 5"),
    (doc(verifier="{command: , metric: m, direction: minimize}"),
     "program.md:4: verifier.command: expected a non-empty string, got nothing"),
    (doc(verifier="{command: c, metric: val loss, direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 'val loss'"),
    (doc(verifier="{command: c, metric: 'loss:', direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 'loss:'"),
    (doc(verifier="{command: c, metric: 'a=b', direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 'a=b'"),
    (doc(verifier="{command: c, metric: '', direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got ''"),
    (doc(verifier="{command: c, metric: 5, direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 5"),
    (doc(verifier="{command: c, metric: \"a\\nb\", direction: minimize}"),
     "program.md:4: verifier.metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 'a\\nb'"),
    (doc(verifier="{command: c, pattern: '([0-9]', direction: minimize}"),
     "program.md:4: verifier.pattern: invalid regular expression: missing ), unterminated "
     "subpattern at position 0"),
    (doc(verifier="{command: c, pattern: '[0-9]+', direction: minimize}"),
     "program.md:4: verifier.pattern: needs a group around the number, e.g. 'acc=([0-9.]+)'"),
    (doc(verifier="{command: c, pattern: '', direction: minimize}"),
     "program.md:4: verifier.pattern: expected a non-empty string, got ''"),
    (doc(verifier="{command: c, metric: m, direction: minimise}"),
     "program.md:4: verifier.direction: 'minimise' is not one of minimize, maximize "
     "(did you mean 'minimize'?)"),
    (doc(verifier="{command: c, metric: m, direction: Maximize}"),
     "program.md:4: verifier.direction: 'Maximize' is not one of minimize, maximize "
     "(did you mean 'maximize'?)"),
    (doc(verifier="{command: c, metric: m, direction: up}"),
     "program.md:4: verifier.direction: 'up' is not one of minimize, maximize"),
    (doc(verifier="{command: c, metric: m, direction: }"),
     "program.md:4: verifier.direction: nothing is not one of minimize, maximize"),
    # YAML 1.1 reads no/off/yes as booleans: the message quotes what the user typed
    (doc(verifier="{command: c, metric: m, direction: no}"),
     "program.md:4: verifier.direction: 'no' (YAML reads it as false) is not one of minimize, maximize"),
]


@pytest.mark.parametrize(("text", "message"), TOP_ERRORS)
def test_top_level_value_errors(text: str, message: str) -> None:
    assert error(text) == message


def test_error_names_the_actual_file() -> None:
    assert error(prog("verifer: x"), name="myprog.md") == (
        "myprog.md:8: unknown key 'verifer' (did you mean 'verifier'?)")


def test_config_error_is_a_usage_error_with_exit_2() -> None:
    with pytest.raises(UsageError) as info:
        parse(prog("zzz: 1"))
    assert info.value.exit_code == 2


@pytest.mark.parametrize("text", [t for t, _ in FILE_ERRORS + YAML_ERRORS + TOP_ERRORS])
def test_every_message_is_one_line(text: str | bytes) -> None:
    assert "\n" not in error(text)


def test_errors_are_reported_in_file_order() -> None:
    # Two faults: the first one in the file is the one named.
    assert error(prog("stop: {patience: 0}\nverifer: x")).startswith("program.md:8: ")


# ---------------------------------------------------------------------------------------------
# Guard names

GUARD_NAMES = [
    ("python -m pytest -q", "pytest"),
    ("python3.11 -m pytest tests/", "pytest"),
    ("pytest", "pytest"),
    ("ruff check .", "ruff-check"),
    ("make test", "make-test"),
    ("npm test", "test"),
    ("npm run lint", "lint"),
    ("uv run mypy src", "mypy-src"),
    ("./scripts/check.sh --fast", "check"),
    ("FOO=1 cargo test", "cargo-test"),
    ("bash -c 'make all'", "make-all"),
    ("python", "guard"),
    ("-x", "guard"),
    ("'unclosed quote", "unclosed-quote"),
    ("A_Very_Long_Tool_Name_That_Goes_On and more", "a-very-long-tool-name-th"),
]


@pytest.mark.parametrize(("command", "name"), GUARD_NAMES)
def test_guard_names(command: str, name: str) -> None:
    assert guard_name(command) == name


def test_guard_names_avoid_taken_ones() -> None:
    assert guard_name("pytest", {"pytest", "pytest-2"}) == "pytest-3"


# ---------------------------------------------------------------------------------------------
# Program helpers

def test_protected_paths_sit_next_to_the_program() -> None:
    p = parse_program(prog(), REPO / "exp" / "program.md", REPO)
    assert dict(p.protected) == {"exp/program.md": "program file",
                                 "exp/experiments.md": "journal", "exp/results.tsv": "journal",
                                 "exp/.autoloop": "autoloop state"}


def test_protected_paths_at_the_root() -> None:
    assert set(parse(prog()).protected) == {"program.md", "experiments.md", "results.tsv",
                                            ".autoloop"}


@pytest.mark.parametrize(("path", "reason"), [
    ("train.py", None),
    ("eval.py", None),
    ("program.md", "protected (program file)"),
    ("experiments.md", "protected (journal)"),
    ("results.tsv", "protected (journal)"),
    (".autoloop/ledger.jsonl", "protected (autoloop state)"),
    (".git/config", "inside .git"),
])
def test_path_rules_from_the_program(path: str, reason: str | None) -> None:
    p = parse(prog().replace("allowed: [train.py]", "allowed: ['**']"))
    rules = PathRules(p.allowed, p.forbidden, p.protected)
    assert rules.why_not(path) == reason


# ---------------------------------------------------------------------------------------------
# load_program: real files in real repositories

def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def test_load_finds_the_repository_root(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    p = load_program(write(repo / "program.md", prog()))
    assert (p.path, p.repo_root) == (repo.resolve() / "program.md", repo.resolve())


def test_load_from_a_subdirectory(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    p = load_program(write(repo / "exp" / "a" / "program.md", prog()))
    assert (p.repo_root, p.rel_path) == (repo.resolve(), "exp/a/program.md")


def test_load_a_relative_path(make_repo: Callable[..., Path],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo({"train.py": ""})
    write(repo / "program.md", prog())
    monkeypatch.chdir(repo)
    assert load_program(Path("program.md")).path == repo.resolve() / "program.md"


def test_load_through_a_symlinked_directory(make_repo: Callable[..., Path],
                                            tmp_path: Path) -> None:
    repo = make_repo({"train.py": ""})
    write(repo / "program.md", prog())
    link = tmp_path / "link"
    link.symlink_to(repo)
    assert load_program(link / "program.md").rel_path == "program.md"


def test_load_keeps_the_exact_bytes(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    raw = prog().replace("\n", "\r\n").encode()
    assert load_program(write(repo / "program.md", raw)).source == raw


def test_load_reports_content_errors_with_the_file_name(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    path = write(repo / "myprog.md", prog("verifer: x"))
    with pytest.raises(ConfigError, match=r"^myprog\.md:8: unknown key 'verifer'"):
        load_program(path)


def test_load_undecodable_file(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    with pytest.raises(ConfigError) as info:
        load_program(write(repo / "program.md", BAD_UTF8))
    assert str(info.value) == "program.md:3: not valid UTF-8 (byte 0xe9); save the file as UTF-8"


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.md"
    with pytest.raises(UsageError) as info:
        load_program(path)
    assert str(info.value) == f"cannot read program file {path}: no such file"


def test_load_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_program(tmp_path)
    assert str(info.value) == f"cannot read program file {tmp_path}: it is a directory"


def test_load_other_os_errors_name_the_path(tmp_path: Path) -> None:
    path = write(tmp_path / "file.txt", "") / "program.md"
    with pytest.raises(UsageError) as info:
        load_program(path)
    assert str(info.value) == f"cannot read program file {path}: Not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_load_unreadable_file(make_repo: Callable[..., Path]) -> None:
    path = write(make_repo({"train.py": ""}) / "program.md", prog())
    path.chmod(0)
    with pytest.raises(UsageError) as info:
        load_program(path)
    assert str(info.value) == f"cannot read program file {path}: Permission denied"


def test_load_outside_a_repository(tmp_path: Path) -> None:
    path = write(tmp_path / "plain" / "program.md", prog())
    with pytest.raises(RepoStateError) as info:
        load_program(path)
    assert str(info.value).startswith(f"{path.resolve()} is not inside a git work tree (fatal: ")


def test_load_inside_dot_git_is_refused(make_repo: Callable[..., Path]) -> None:
    repo = make_repo({"train.py": ""})
    with pytest.raises(RepoStateError, match="is not inside a git work tree"):
        load_program(write(repo / ".git" / "program.md", prog()))


# ---------------------------------------------------------------------------------------------
# program.md.example: the reference of every key

EXAMPLE = ROOT / "program.md.example"


def test_example_parses() -> None:
    p = parse_program(EXAMPLE.read_bytes(), EXAMPLE, ROOT)
    assert (p.goal, p.verifier.metric, [g.name for g in p.guards]) == (
        "Lower the validation loss of train.py", "val_loss", ["pytest", "lint"])


def test_example_has_a_body() -> None:
    assert parse_program(EXAMPLE.read_bytes(), EXAMPLE, ROOT).body.startswith(
        "# Instructions to the generator")


@pytest.mark.parametrize("key", known_keys())
def test_example_documents_every_key(key: str) -> None:
    leaf = re.escape(key.rsplit(".", 1)[-1].split("[")[0])
    # Live or commented out (alternatives such as pattern cannot be live at once).
    assert re.search(rf"^\s*(#\s*)?(- )?{leaf}:", EXAMPLE.read_text(), re.MULTILINE), key


def test_example_lists_every_generator_kind() -> None:
    text = EXAMPLE.read_text()
    assert all(re.search(rf"\b{kind}\b", text) for kind in KINDS)


def test_example_commented_alternatives_are_valid() -> None:
    text = EXAMPLE.read_text()
    text = re.sub(r"^  metric: val_loss .*\n(\s+#.*\n)", "", text, flags=re.MULTILINE)
    for key in ("pattern", "command", "base_url"):
        text = re.sub(rf"^  # {key}:", f"  {key}:", text, flags=re.MULTILINE)
    p = parse_program(text, EXAMPLE, ROOT)
    assert (p.verifier.metric, p.verifier.pattern, p.generator.command, p.generator.base_url) == (
        None, "accuracy ([0-9.]+)%", "my-agent --flag", "http://127.0.0.1:8000/v1")


@pytest.mark.parametrize("command, flagged", [
    ("python bench/run.py --quick", ["bench/run.py"]),
    ("./measure.sh", ["measure.sh"]),
    ("bash eval.sh | tail -1", ["eval.sh"]),
    ("python bench/ok.py", []),                    # there
    ("make && ./build/bench", []),                 # a later command may run what make built
    ("python gen.py > b.py; python b.py", ["gen.py"]),
    ("cd sub && python x.py", []),                 # relative to another folder
    ("python -m bench.run", []),
    ("python /opt/eval.py", []),                   # outside the repository: not ours to say
    ('python "$HOME/eval.py"', []),
    ("python data/ext/run.py", []),                # linked into the measured tree by `data:`
])
def test_a_script_a_command_runs_that_is_nowhere_is_found(make_repo, tmp_path: Path, command: str,
                                                          flagged: list[str]) -> None:
    from autoloop.engine.hints import missing_scripts
    from autoloop.program.reader import load_program

    (tmp_path / "ext").mkdir()
    repo = make_repo({"bench/ok.py": "print('s: 1')\n", "program.md": (
        f"---\ngoal: g\nallowed: [a.py]\ndata: [{{path: {tmp_path / 'ext'}, as: data/ext}}]\n"
        f"verifier: {{command: '{command}', metric: s, direction: minimize}}\n---\nbody\n")})
    program = load_program(repo / "program.md")
    found = missing_scripts(program, lambda rel: False)
    assert [ln.split(" runs ")[1].split(",")[0] for ln in found] == flagged, found
    assert all(ln.startswith("program.md:5: verifier.command runs ") for ln in found)
    assert missing_scripts(program, lambda rel: True) == []       # HEAD has it: measured fine
    assert missing_scripts(program, lambda rel: None) == []       # no HEAD to ask: not ours to say


def test_a_guard_problem_names_the_line_of_its_command(make_repo) -> None:
    """A guard written as a string is one line; written as a mapping, its command has its own:
    both the missing-script and the judge-under-allowed messages send the user there."""
    from autoloop.errors import ConfigError
    from autoloop.engine.hints import missing_scripts
    from autoloop.isolation.measured_files import protected_paths
    from autoloop.program.reader import load_program

    repo = make_repo({"program.md": (
        "---\ngoal: g\nallowed: [a.py, g.py]\n"
        "verifier: {command: python s.py, metric: s, direction: minimize}\n"
        "guards:\n  - python gone1.py\n  - name: lint\n    command: python gone2.py\n---\nbody\n"),
        "s.py": "", "g.py": ""})
    program = load_program(repo / "program.md")
    found = missing_scripts(program, lambda rel: False)
    assert [ln.split(", which")[0] for ln in found] == [
        "program.md:6: guards[0].command runs gone1.py", "program.md:8: guards[1].command runs gone2.py"]
    (repo / "program.md").write_text((repo / "program.md").read_text().replace("gone2.py", "g.py"))
    with pytest.raises(ConfigError, match=r"^program\.md:8: guards\[1\]\.command runs g\.py, which 'allowed'"):
        protected_paths(load_program(repo / "program.md"))
