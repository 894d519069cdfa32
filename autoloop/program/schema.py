"""program.md's schema: one table of keys, their checks, and the checks that span keys.

Adding a key is a field on its dataclass (autoloop.base.specs) and one entry in a table below.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import types
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from autoloop.process.envs import unsafe as unsafe_env
from autoloop.errors import UsageError
from autoloop.program.frontmatter import (At, Build, Check, ListOf, Reader, Section, at_least, boolean,
                                  exactly_one, matching, number, one_of, show, text, walk_keys)
from autoloop.program.hide_key import hide_apart, hide_paths
from autoloop.program.globs import PathRules, is_git_path, path_problem, pattern_problem, touches_git
from autoloop.base.walk import worktrees_root
from autoloop.base.hosts import BadHost, parse_entry
from autoloop.base.specs import (GENERATOR_KINDS, MAX_WORKERS, AcceptSpec, Amount, DataSpec,
                            GeneratorSpec, GuardSpec, HoldoutSpec, LimitSpec, ParallelSpec,
                            PriceSpec, Program, ResourcesSpec, SandboxSpec, StopSpec, VerifierSpec,
                            guard_name)
from autoloop.decide.wording import plural

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PERCENT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*")


def parse_program(text: bytes | str, path: Path, repo_root: Path) -> Program:
    """Validate program text read from `path` (named in messages) in the repository `repo_root`."""
    path, repo_root = Path(path).absolute(), Path(repo_root).absolute()
    if not path.is_relative_to(repo_root):
        raise UsageError(f"program file {path} is not inside the repository {repo_root}")
    source = text if isinstance(text, bytes) else text.encode("utf-8")
    reader = Reader(path.name)
    node, body = reader.front_matter(source)
    values = _program_section(repo_root, path.parent)(reader, node, At("", 1))
    return Program(path=path, repo_root=repo_root, body=body, source=source,
                   lines=types.MappingProxyType(dict(reader.lines)), **values)


def known_keys() -> tuple[str, ...]:
    """Every key program.md accepts, dotted (`guards[].name` for keys of a guard mapping)."""
    return tuple(walk_keys(_program_section(Path("."))))


def _amount(below_pct: float | None = None) -> Check:
    """A number >= 0 (metric units) or a percentage of a reference such as '1%'."""
    what = "a number >= 0 (metric units) or a percentage such as '1%'"

    def check(p: Reader, node: yaml.Node, at: At) -> Amount:
        value = p.value(node)
        if not isinstance(value, str):
            return Amount(number(what, least=0)(p, node, at), False)
        if not (m := _PERCENT.fullmatch(value)):
            p.expected(at, what, value)
        if below_pct is not None and not float(m.group(1)) < below_pct:
            p.fail(at.line, f"{at.key}: {value.strip()} is too large: a percentage below "
                            f"{below_pct:g}% is needed")
        return Amount(float(m.group(1)), True)

    return check


def _regex_with_group(p: Reader, node: yaml.Node, at: At) -> str:
    value: str = text()(p, node, at)
    try:
        groups = re.compile(value).groups
    except re.error as exc:
        p.fail(at.line, f"{at.key}: invalid regular expression: {exc}")
    if groups < 1:
        p.fail(at.line, f"{at.key}: needs a group around the number, e.g. 'acc=([0-9.]+)'")
    return value


def _host_paths(p: Reader, node: yaml.Node, at: At) -> tuple[str, ...]:
    """Absolute paths on this machine (`~` allowed): a list, or one string."""
    out = []
    for where, item in p.items(node, at):
        value = p.value(item)
        if not isinstance(value, str) or not value.strip():
            p.expected(where, "an absolute path (or ~/...)", value)
        if not os.path.isabs(os.path.expanduser(value)):
            p.fail(where.line, f"{where.key}: {value!r} must be absolute (or start with ~/)")
        out.append(value)
    return tuple(out)


def _hosts(p: Reader, node: yaml.Node, at: At) -> tuple[str, ...]:
    """Hosts the egress proxy allows (`host`, `host:port`, `*.domain`, an address): a list, or one."""
    out = []
    for where, item in p.items(node, at):
        value = p.value(item)
        if not isinstance(value, (str, int)) or not str(value).strip():
            p.expected(where, "a host, host:port or *.domain", value)
        try:
            parse_entry(str(value))
        except BadHost as exc:
            p.fail(where.line, f"{where.key}: {exc}")
        out.append(str(value).strip())
    return tuple(out)


def _private(root: Path) -> Check:
    """Paths outside the repository (`~` allowed) that must exist: only `score` and `holdout`
    see them, so one inside the repository would be readable through its history anyway."""

    def check(p: Reader, node: yaml.Node, at: At) -> tuple[Path, ...]:
        out = []
        for (where, _), value in zip(p.items(node, at), _host_paths(p, node, at)):
            full = Path(os.path.expanduser(value)).resolve()
            if full.is_relative_to(root.resolve()):
                p.fail(where.line, f"{where.key}: {value!r} is inside the repository, where the generator "
                                   "can read it (and its git history); move it outside the repository")
            if root.resolve().is_relative_to(full):
                p.fail(where.line, f"{where.key}: {value!r} holds the repository, which would be hidden "
                                   "from every process; name the folder of the private files instead")
            if not full.exists():
                p.fail(where.line, f"{where.key}: {value!r} does not exist; create it or fix the path")
            out.append(full)
        return tuple(out)

    return check


def _args(p: Reader, node: yaml.Node, at: At) -> tuple[str, ...]:
    """A list of strings, or one string split the way a shell would."""
    value = p.value(node)
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:                      # e.g. an unclosed quote
            p.fail(at.line, f"{at.key}: cannot split {value!r}: {exc}")
    if not isinstance(node, yaml.SequenceNode):
        p.expected(at, "a list of strings", value)
    for where, item in p.items(node, at):
        if not isinstance(arg := p.value(item), str):
            p.expected(where, "a string", arg)
    return tuple(p.value(item) for item in node.value)


def _patterns(*, required: bool) -> Check:
    """Path globs (autoloop.program.globs): a list, or one string as a one-item list."""

    def check(p: Reader, node: yaml.Node, at: At) -> tuple[str, ...]:
        if not isinstance(node, yaml.SequenceNode) and not isinstance(p.value(node), str):
            p.expected(at, "a list of path patterns", p.value(node))
        items = [item for _, item in p.items(node, at)]
        if required and not items:
            p.fail(at.line, f"{at.key}: must list at least one path pattern")
        for item in items:
            line, pattern = p.line(item), p.value(item)
            if not isinstance(pattern, str):
                p.fail(line, f"{at.key}: expected a path pattern, got {show(pattern)}")
            if problem := pattern_problem(pattern):
                p.fail(line, f"{at.key}: {pattern!r} {problem}")
            if required and touches_git(pattern):   # (forbidding .git is harmless)
                p.fail(line, f"{at.key}: {pattern!r} would match .git, which is never editable")
        return tuple(p.value(item) for item in items)

    return check


def _worker_envs(p: Reader, node: yaml.Node, at: At) -> tuple[Mapping[str, str], ...]:
    """One mapping NAME: value per worker; numbers are taken as written (`0` means "0")."""
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        p.expected(at, "a non-empty list of mappings, one per worker, e.g. [{CUDA_VISIBLE_DEVICES: "
                       '"0"}, {CUDA_VISIBLE_DEVICES: "1"}]', p.value(node))
    out: list[Mapping[str, str]] = []
    for where, item in p.items(node, at):
        if not isinstance(item, yaml.MappingNode):
            p.expected(where, "a mapping of environment variables such as "
                              '{CUDA_VISIBLE_DEVICES: "0"}', p.value(item))
        env: dict[str, str] = {}
        for name, key, value_node in p.pairs(item, where):
            if not _ENV_NAME.fullmatch(name):
                p.fail(key.line, f"{key.key}: {name!r} is not an environment variable name "
                                 "(letters, digits and '_', not starting with a digit)")
            if name.startswith(("AUTOLOOP_", "GIT_")):
                p.fail(key.line, f"{key.key}: {name} is set by autoloop (or git) itself; choose "
                                 "another name")
            if unsafe_env(name):
                p.fail(key.line, f"{key.key}: {name} is removed from every verification (it could "
                                 "make the verifier run code from outside the measured tree); set "
                                 "it in the verifier's command instead")
            value = p.value(value_node)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                p.expected(key, "a string or a number", value)
            env[name] = value if isinstance(value, str) else str(value_node.value)
        out.append(types.MappingProxyType(env))
    return tuple(out)


def _ray_resources(p: Reader, node: yaml.Node, at: At) -> Mapping[str, float]:
    """Ray's custom resources one verification task asks for: NAME: amount (`{fast_disk: 1}`)."""
    if not isinstance(node, yaml.MappingNode) or not node.value:
        p.expected(at, "a mapping of Ray resource names to amounts, e.g. {bench_node: 1}", p.value(node))
    out: dict[str, float] = {}
    for name, key, value_node in p.pairs(node, at):
        if name in ("CPU", "GPU", "memory", "object_store_memory") or name.startswith(("node:", "accelerator_type:")):
            p.fail(key.line, f"{key.key}: {name} is not a custom resource; use parallel.num_cpus, "
                             "parallel.num_gpus or parallel.accelerator_type")
        value = p.value(value_node)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            p.expected(key, "a number > 0", value)
        out[name] = float(value)
    return types.MappingProxyType(out)


# ---------------------------------------------------------------------------- checks across keys

def _into(cls: Callable[..., Any]) -> Build:
    return lambda p, values, at: cls(**values)


def _metric_or_pattern(what: str, into: Callable[..., Any] = dict) -> Build:
    def build(p: Reader, values: dict[str, Any], at: At) -> Any:
        exactly_one(p, values, at, ("metric", "pattern"), "give metric or pattern, not both",
                    f"needs metric ({what}) or pattern (a regex whose first group is the number)")
        return into(**values)
    return build


def _only_with(p: Reader, values: dict[str, Any], keys: tuple[str, ...], section: str,
               setting: str) -> None:
    for key in keys:
        if key in values:
            p.fail_key(f"{section}.{key}", f"only used with {section}.{setting}")


def _build_verifier(p: Reader, values: dict[str, Any], at: At) -> VerifierSpec:
    how = values.get("measure", "output")
    if "inputs" in values and "score" not in values:
        p.fail_key("verifier.inputs", "needs verifier.score: the inputs are made where the score runs (the "
                                      "start commit's tree), before the command, and handed to it on its stdin")
    if how == "output":
        return _metric_or_pattern("the metric's name, e.g. val_loss", VerifierSpec)(p, values, at)
    # timed from outside: the output is not read, `metric` only names the number
    if "pattern" in values:
        p.fail_key("verifier.pattern", f"not read with verifier.measure: {how} (autoloop times the "
                                       "command itself); remove it and name the number with metric:")
    if values.get("direction") == "maximize":
        p.fail_key("verifier.direction", f"must be minimize with verifier.measure: {how} (fewer "
                                         "seconds is better); measure: output reads a number to maximize")
    return VerifierSpec(**{"metric": "seconds", **values})


def _build_limit(p: Reader, values: dict[str, Any], at: At) -> LimitSpec:
    _metric_or_pattern("a name in the verifier's output, e.g. peak_mem_mb")(p, values, at)
    exactly_one(p, values, at, ("max_increase", "max_decrease"),
                "give max_increase or max_decrease, not both (a limit is one-sided; write two "
                "items for both)", "needs max_increase or max_decrease (e.g. 10% of the "
                                   "baseline, or a number in metric units)")
    return LimitSpec(**values)


def _build_generator(p: Reader, values: dict[str, Any], at: At) -> GeneratorSpec:
    if "kind" not in values and "command" in values:
        values["kind"] = "command"   # the default kind (claude) would silently ignore the command
    if values.get("kind") == "command" and "command" not in values:
        p.fail(p.lines["generator.kind"], "generator.command: required when generator.kind is "
                                          "'command'")
    return GeneratorSpec(**values)


def _reachable(pairs: int, alpha: float) -> bool:
    """Can the sequential test keep after `pairs` pairs at level `alpha` (every candidate run
    better than every incumbent run)?"""
    from autoloop.decide import stats
    up, _ = stats.rank_evidence([2.0] * pairs, [1.0] * pairs, "minimize", "log")
    return pairs >= 2 and up[-1] >= math.log(1.0 / alpha)


def _build_accept(p: Reader, values: dict[str, Any], at: At) -> AcceptSpec:
    paired = values.get("rule") == "paired"
    if not paired:
        _only_with(p, values, ("alpha", "pairs", "confirm"), "accept", "rule: paired (the strict "
                   "rule compares one measurement, or the median of verifier.repeats, per side)")
    # the sequential test holds its false-keep rate at alpha by construction, so one test at
    # 0.005 replaces two fixed batches at 0.05; 16 pairs is the most a decision may take
    paired_defaults = {"min_effect": Amount(1.0, True), "alpha": 0.005, "pairs": 16}
    spec = AcceptSpec(**{**paired_defaults, **values} if paired else values)
    if spec.alpha > 0.5:
        p.fail_key("accept.alpha", f"expected a level between 0 and 0.5, e.g. 0.05, got "
                                   f"{spec.alpha:g}")
    if paired and not _reachable(spec.pairs, spec.alpha):
        need = next(n for n in range(2, 64) if _reachable(n, spec.alpha))
        same = "(even when every pair shows the same gain)"
        if "pairs" in values:
            p.fail_key("accept.pairs", f"{plural(spec.pairs, 'pair')} can never reach alpha "
                                       f"{spec.alpha:g} {same}; use at least {need} pairs")
        p.fail_key("accept.alpha", f"{spec.alpha:g} is out of reach of {spec.pairs} pairs {same}; "
                                   f"set accept.pairs to at least {need}")
    return spec


def _build_parallel(p: Reader, values: dict[str, Any], at: At) -> ParallelSpec:
    workers, verify = values.get("workers"), values.get("verify")
    if workers is not None and workers > MAX_WORKERS:
        p.fail_key("parallel.workers", f"expected a whole number from 1 to {MAX_WORKERS}, got "
                                       f"{workers}")
    if workers is not None and verify is not None and verify > workers:
        p.fail_key("parallel.verify", f"{verify} is more than parallel.workers ({workers}); a "
                                      f"round has at most {workers} candidates to verify")
    if workers is not None and "env" in values and len(values["env"]) > workers:
        p.fail_key("parallel.env", f"{len(values['env'])} entries for {workers} workers; give one "
                                   "per worker (worker i uses entry i)")
    if values.get("executor") != "ray":
        _only_with(p, values, ("address", "num_cpus", "num_gpus", "accelerator_type", "resources", "max_output_mb"),
                   "parallel", "executor: ray")
    return ParallelSpec(**values)


def _build_program(p: Reader, values: dict[str, Any], at: At, repo_root: Path, state_dir: Path) -> dict[str, Any]:
    verifier: VerifierSpec = values["verifier"]
    if values.get("accept", AcceptSpec()).rule == "paired" and verifier.repeats > 1:
        p.fail_key("verifier.repeats", "only used with accept.rule: strict (the paired rule "
                                       "measures accept.pairs incumbent/candidate pairs instead)")
    if "holdout" in values:
        values["holdout"] = HoldoutSpec(**{"direction": verifier.direction, **values["holdout"]})
    if values.get("private") and values.get("sandbox", SandboxSpec()).kind == "none":
        p.fail_key("private", "private paths are kept from the generator and the candidate's code by "
                              "the sandbox, and sandbox is none; remove `sandbox: none` (or the private key)")
    _private_apart(p, values)
    _places_apart(p, values, repo_root, state_dir)
    hide_apart(p, values.get("sandbox", SandboxSpec()), values.get("data", ()), repo_root)
    editable = PathRules(values["allowed"], values.get("forbidden", ()))
    for i, d in enumerate(values.get("data", ())):
        if editable.allows(d.target) or editable.allows(d.target + "/x"):
            p.fail(p.lines.get(f"data[{i}].as", p.lines[f"data[{i}]"]),
                   f"data[{i}].as: {d.target!r} is a path 'allowed' lets the generator "
                   "write; read-only data needs a place it cannot touch")
    return values


def _places_apart(p: Reader, values: dict[str, Any], repo_root: Path, state_dir: Path) -> None:
    """A `sandbox.writable` path is bound writable into every sandbox, a `data` path read-only into
    every measurement: one that holds the repository, lies inside it, or overlaps autoloop's
    worktrees or its state (.autoloop/ beside program.md) would let a measurement write the files
    it measures, the journal or git's folder, or read the ledger. Data kept inside the checkout
    (the short form `data: [data/cache]` names one) is refused too: a measurement's tree is shown
    at the checkout's path, over it, so the folder is not there to bind."""
    root = repo_root.resolve()
    state = state_dir.resolve() / ".autoloop"
    trees = worktrees_root().resolve()
    sandbox: SandboxSpec = values.get("sandbox", SandboxSpec())
    places: list[tuple[str, str, Path, bool]] = [
        (f"sandbox.writable[{i}]", w, Path(os.path.expanduser(w)).resolve(), True) for i, w in enumerate(sandbox.writable)]
    places += [(f"data[{i}].path", str(d.source), d.source, False) for i, d in enumerate(values.get("data", ()))]
    for key, shown, full, writable in places:
        # the item's own line: `data[0].path` of a mapping, `data[0]` of the short form
        line = next((p.lines[k] for k in (key, key.removesuffix(".path"), key.split("[")[0]) if k in p.lines), 1)
        fix = ("name a folder outside the repository and outside autoloop's (for example ~/scratch/NAME)"
               if writable else "move the data to a folder outside the repository and map it: "
               "{path: /abs/folder, as: " + (values["data"][int(key[5:key.index("]")])].target) + "}")
        if root.is_relative_to(full):
            p.fail(line, f"{key}: '{shown}' holds the repository: every sandbox would "
                         f"{'write' if writable else 'see'} your checkout, its .git and the journal "
                         f"through it; {fix}")
        if full.is_relative_to(state) or state.is_relative_to(full):
            p.fail(line, f"{key}: '{shown}' overlaps autoloop's state ({state}): the ledger and the "
                         f"measurements' seeds would be {'writable' if writable else 'readable'} there; {fix}")
        if full.is_relative_to(root):
            p.fail(line, f"{key}: '{shown}' lies inside the repository: "
                         + ("a measurement writing there would change the files it measures and your "
                            "checkout; " if writable else "data is read from outside git; ") + fix)
        if full.is_relative_to(trees) or trees.is_relative_to(full):
            p.fail(line, f"{key}: '{shown}' overlaps autoloop's worktrees ({trees}), where the candidates "
                         f"are measured; {fix}")


def _private_apart(p: Reader, values: dict[str, Any]) -> None:
    """A private path that overlaps a path the sandboxes bind writable, or a `data:` source that
    every measurement reads, would be reachable from there."""
    sandbox: SandboxSpec = values.get("sandbox", SandboxSpec())
    shared = [(f"sandbox.writable '{w}'", Path(os.path.expanduser(w)).resolve()) for w in sandbox.writable]
    shared += [(f"data[{i}].path '{d.source}'", d.source) for i, d in enumerate(values.get("data", ()))]
    for i, path in enumerate(values.get("private", ())):
        for what, other in shared:
            if path.is_relative_to(other) or other.is_relative_to(path):
                p.fail(p.lines.get(f"private[{i}]", p.lines["private"]),
                       f"private[{i}]: '{path}' overlaps {what}, where the generator or the candidate's "
                       "code can reach it; keep private paths apart from both")


# ---------------------------------------------------------------------------- list items

def _guard(p: Reader, where: At, spec: dict[str, Any], named: dict[str, int]) -> dict[str, Any]:
    if "name" in spec:
        line = p.lines[f"{where.key}.name"]
        if spec["name"] in named:
            p.fail(line, f"{where.key}.name: {spec['name']!r} is already the name of the guard "
                         f"on line {named[spec['name']]}")
        named[spec["name"]] = line
    return spec


def _guards_done(items: list[dict[str, Any]]) -> tuple[GuardSpec, ...]:
    taken = {spec["name"] for spec in items if "name" in spec}
    for spec in items:
        if "name" not in spec:
            spec["name"] = guard_name(spec["command"], taken)
            taken.add(spec["name"])
    return tuple(GuardSpec(**spec) for spec in items)


def _data_short(p: Reader, node: yaml.Node, where: At) -> dict[str, Any]:
    target = p.value(node).strip()
    if path_problem(target) or os.path.isabs(target):
        p.fail(where.line, f"{where.key}: {target!r}: a short form must be a repo-relative path; "
                           "use {path: /abs/source, as: repo/relative/place}")
    return {"path": target, "as": target}


def _data_item(root: Path) -> Callable[[Reader, At, dict[str, Any], dict[str, int]], DataSpec]:
    def each(p: Reader, where: At, spec: dict[str, Any], seen: dict[str, int]) -> DataSpec:
        target = spec["as"]
        line = p.lines.get(f"{where.key}.as", where.line)
        if problem := path_problem(target):
            p.fail(line, f"{where.key}.as: {target!r}: {problem}")
        if is_git_path(target):
            p.fail(line, f"{where.key}.as: {target!r} would be inside .git")
        for other, other_line in seen.items():
            if target == other or target.startswith(other + "/") or other.startswith(target + "/"):
                p.fail(line, f"{where.key}.as: {target!r} overlaps the data on line {other_line}")
        seen[target] = line
        full = Path(os.path.expanduser(spec["path"]))
        return DataSpec((full if full.is_absolute() else root / full).resolve(), target)
    return each


# ---------------------------------------------------------------------------- the table

_TEXT, _LINE = text(), text(one_line=True)
_SECONDS = number("a positive number of seconds", above=0)
_METRIC = matching(r"[A-Za-z0-9_.-]+", "a metric name of letters, digits, '_', '.', '-'")
_DIRECTION = one_of(("minimize", "maximize"))
_MB = number("a positive number of MB", above=0)


_GUARD = Section({"name": matching(r"[A-Za-z0-9][A-Za-z0-9_.-]*",
                                   "a name of letters, digits, '_', '.', '-'"),
                  "command": _TEXT, "timeout": _SECONDS}, _into(dict), required={"command"})

_VERIFIER = Section({
    "command": _TEXT, "metric": _METRIC, "pattern": _regex_with_group, "direction": _DIRECTION,
    "timeout": _SECONDS, "repeats": at_least(1), "network": boolean, "hosts": _hosts,
    "measure": one_of(("output", "wall", "cpu")), "score": _TEXT, "inputs": _TEXT,
}, _build_verifier, required={"command", "direction"})

_ACCEPT = Section({
    "rule": one_of(("strict", "paired")), "min_effect": _amount(below_pct=100),
    "alpha": number("a level between 0 and 0.5, e.g. 0.05", above=0), "pairs": at_least(1),
    "confirm": boolean, "warmup": at_least(0), "final_pairs": at_least(0),
}, _build_accept)

_LIMIT = Section({"metric": _METRIC, "pattern": _regex_with_group, "max_increase": _amount(),
                  "max_decrease": _amount()}, _build_limit)

_HOLDOUT = Section({"command": _TEXT, "metric": _METRIC, "pattern": _regex_with_group,
                    "direction": _DIRECTION, "timeout": _SECONDS},
                   _metric_or_pattern("the metric's name"), required={"command"})

_PRICE = Section({"input": number("USD per million input tokens (>= 0)", least=0),
                  "output": number("USD per million output tokens (>= 0)", least=0)},
                 _into(PriceSpec), required={"input", "output"})

_GENERATOR = Section({
    "kind": one_of(GENERATOR_KINDS), "command": _TEXT, "timeout": _SECONDS, "args": _args,
    "model": _LINE,
    "base_url": matching(r"https?://\S+", "a URL starting with http:// or https://"),
    "max_turns": at_least(1), "max_tokens": at_least(1), "price": _PRICE,
    "seed": number("a whole number", whole=True),
}, _build_generator)

_STOP = Section({
    "max_cycles": at_least(0), "max_minutes": number("a positive number of minutes", above=0),
    "patience": at_least(1), "target": number(),
    "max_cost_usd": number("a positive amount of USD", above=0),
}, _into(StopSpec))

_SANDBOX = Section({"kind": one_of(("auto", "none", "bwrap")), "network": boolean,
                    "writable": _host_paths, "hosts": _hosts, "hide": hide_paths(_host_paths),
                    "unix_sockets": boolean},
                   _into(SandboxSpec), scalar_key="kind")

_RESOURCES = Section({"max_change_mb": _MB, "max_disk_mb": _MB, "max_processes": at_least(1)},
                     _into(ResourcesSpec))

_DATA = Section({"path": _LINE, "as": _LINE}, _into(dict), required={"path", "as"})

_PARALLEL = Section({
    "workers": number(f"a whole number from 1 to {MAX_WORKERS}", least=1, whole=True),
    "verify": number("a whole number >= 1 (verifications at once)", least=1, whole=True),
    "executor": one_of(("local", "ray")), "address": _LINE,
    "num_cpus": number("a number >= 0 (CPUs per verification task)", least=0),
    "num_gpus": number("a number >= 0 (GPUs per verification task)", least=0),
    "accelerator_type": _LINE, "resources": _ray_resources,
    "max_output_mb": _MB, "env": _worker_envs,
}, _build_parallel)


def _program_section(repo_root: Path, state_dir: Path | None = None) -> Section:
    """The top level; data paths are resolved against `repo_root`."""
    return Section({
        "goal": _LINE, "allowed": _patterns(required=True), "forbidden": _patterns(required=False),
        "verifier": _VERIFIER,
        "guards": ListOf(_GUARD, "a list of commands", "a command or a mapping {name, command, "
                         "timeout}", scalar=lambda p, node, at: {"command": _TEXT(p, node, at)},
                         each=_guard, finish=_guards_done),
        "generator": _GENERATOR, "stop": _STOP, "accept": _ACCEPT,
        "limits": ListOf(_LIMIT, "a list of limits such as {metric: peak_mem_mb, max_increase: "
                         "10%}", "a mapping {metric, max_increase or max_decrease}"),
        "holdout": _HOLDOUT, "sandbox": _SANDBOX, "resources": _RESOURCES,
        "data": ListOf(_DATA, "a list of {path: ..., as: ...}", "a mapping {path, as} or a "
                       "repo-relative path", scalar=_data_short, each=_data_item(repo_root)),
        "parallel": _PARALLEL, "private": _private(repo_root),
    }, lambda p, values, at: _build_program(p, values, at, repo_root, state_dir or repo_root),
        required={"goal", "allowed", "verifier"})
