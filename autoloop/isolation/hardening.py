"""What keeps the verifier's trusted base apart from everything the generator can write or leave
running: preflight; the generator's sandbox, limits and what changed outside its tree; each
measurement's tree proven to hold exactly the candidate, its scrubbed environment and the checks
after every step; before a keep, the commit has the tree that was measured."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from filelock import FileLock, Timeout

from autoloop.isolation import editable
from autoloop.process import envs
from autoloop.process import leftovers, rlimits
from autoloop.errors import ConfigError, RepoStateError, RunFailure
from autoloop.journal.ledger import Journal
from autoloop.isolation.measured_files import commands_by_name, interpreters, named_interpreters
from autoloop.program.reader import Program, check_data
from autoloop.isolation.pycache import ProvenCache, import_wrote
from autoloop.isolation.egress.allowlist import url_rules
from autoloop.isolation.sandbox import Bwrap, Confinement, checkout_keep, probed, tree_box
from autoloop.program.scope_rules import IMPLICIT_FILES, module_shadow_regex
from autoloop.disk.sentinel import Sentinel
from autoloop.base.walk import remove_tree
from autoloop.disk.snapshot import Change
from autoloop.disk.watch import Changed, NameTree, StatTree, Watch, is_injection, site_dirs
from autoloop.git.gitrun import git, git_executable as workspace_git
from autoloop.git.workspace import Workspace, Worktree

MB = 1 << 20
DATA_WATCH_CAP = 1_000_000   # entries of a data folder watched


class Tampered(Exception):
    """A step of a measurement changed what is being measured; the message says what."""


class Guardrails:
    def __init__(self, program: Program, ws: Workspace, journal: Journal,
                 protected: Mapping[str, str]) -> None:
        self.program, self.ws, self.journal = program, ws, journal
        self.protected = dict(protected)
        self.sandbox = Bwrap(program.sandbox, private=program.private) if program.sandbox.kind in ("bwrap", "auto") else None
        # why this run has no sandbox (None: it has one), said in the header, journal and report
        self.unsandboxed: str | None = "sandbox: none in program.md" if self.sandbox is None else None
        self._elsewhere: str | None = None
        self.start_commit: str | None = None   # the commit the run started from (its baseline): the score's tree
        lim = program.resources
        self.limits = rlimits.Limits(file_bytes=int(lim.max_disk_mb * MB), disk_bytes=int(lim.max_disk_mb * MB),
                                  disk_path=ws.path.parent, processes=lim.max_processes)
        self.fatal: str | None = None
        self._shadow = module_shadow_regex(self.protected)
        self._lock_path: Path | None = None
        self._lock_id: tuple[int, int] | None = None
        # A round measures several candidates at once: per-thread measurement state, one thread
        # builds the bytecode cache, the places outside the trees are captured once before all.
        self._local = threading.local()
        self._warm_lock = threading.Lock()
        self._verify_captured = False          # verify_watch holds the state before this cycle's measurements
        self._unchanged: dict[Path, dict] = {}   # verification trees found as last proven (after_generate)
        self._changed_roots: set[Path] = set()
        self.untrusted: list[Path] = [ws.path]   # work trees a generator edited
        self._scratch = ws.path.with_name(ws.path.name + ".scratch")
        # bytecode every measurement starts from, compiled by autoloop itself (autoloop.isolation.pycache)
        self._warm_built = False
        self._proven: ProvenCache | None = None
        self._warm_dir = self._scratch / "pycache-warm"
        self._pycache_tree: StatTree | None = None

    # ---- before anything changes ---------------------------------------------------------------

    def preflight(self, elsewhere: str | None = None) -> None:
        """`elsewhere`: why the executor's measurements run unsandboxed (a Ray node's answer)."""
        p, root = self.program, self.ws.repo_root
        self.sandbox, why = probed(p)
        if self.sandbox is None or elsewhere:
            editable.refuse(p, why or elsewhere or "")
        else:
            refuse_writable_pythons(p)
        self._elsewhere = elsewhere
        self.unsandboxed = "; ".join(w for w in (why, elsewhere) if w) or None
        start = self.ws.branch_head() or self.ws.head()
        check_data(p, start)
        links = [line.split("\t", 1)[-1] for line in git(root, "ls-tree", "-r", start, check=False).splitlines()
                 if line.startswith("160000 ")]
        if links:
            raise RepoStateError(f"{root}: the repository has submodules ({', '.join(links[:3])}); autoloop's "
                                 "private worktrees would not contain them, so verification would not "
                                 "see what you see — not supported (vendor them, or run in a repository "
                                 "without submodules)")
        current = None
        for line in git(root, "worktree", "list", "--porcelain", check=False).splitlines():
            if line.startswith("worktree "):
                current = line[len("worktree "):]
            elif line == f"branch {self.ws.ref}":
                raise RepoStateError(f"branch {self.ws.branch} is checked out in {current}; autoloop moves "
                                     "it as cycles are kept, which would change that checkout under you — "
                                     "switch it to another branch first")

    def user_files(self) -> list[Path]:
        """The verifier's and the guards' own files in your checkout, for the sentinel."""
        root = self.program.repo_root
        return [root / rel for rel, label in self.protected.items()
                if label == "used by the verifier" and (root / rel).is_file()]

    def start(self, sentinel: Sentinel, lock_path: Path, slots: int) -> None:
        """The run begins: watch the trusted base outside the trees (and `slots` verification trees)."""
        self.sentinel = sentinel
        if self._scratch.is_dir():  # what a killed run left: old measurements' scratch, the warm cache
            for old in self._scratch.iterdir():
                remove_tree(old, quiet=True)
        self._lock_path, self._lock_id = lock_path, _identity(lock_path)
        base = envs.scrubbed(os.environ, scratch=self._scratch / "probe")
        sites = site_dirs(named_interpreters(self.program), base)
        remove_tree(self._scratch / "probe", quiet=True)
        self._sites = [StatTree(d, f"the Python installation ({d})", top_only=True) for d in sites]
        # The whole package, bytecode included: a planted .pyc runs as surely as a changed source.
        self._own = StatTree(Path(__file__).resolve().parents[1], "autoloop's own code")
        self._data = [StatTree(d.source, f"the read-only data {d.source}", cap=DATA_WATCH_CAP) for d in self.program.data]
        verify = [StatTree.verification(self.ws.path.with_name(f"{self.ws.path.name}.verify-{slot}"))
                  for slot in range(slots)]
        outside = [*self._sites, self._own, *self._data, *self._programs(base)]
        for t in outside:
            t.carried = True
        if self.sandbox is not None and self._elsewhere is None:
            # No sandboxed command can write there: walking them every cycle would only cost
            # time. Verification trees stay: a measurement may write its own tree, and their
            # pictures spare a walk per measurement.
            outside = [t for t in outside if self._reachable(t.root)]
        self.gen_watch = Watch([*verify, *outside])
        self.verify_watch = Watch(outside)
        self._keep = checkout_keep(self.program)

    def _reachable(self, root: Path) -> bool:
        """Could a sandboxed generator or measurement write under `root` (sandbox.writable)?"""
        real = os.path.realpath(root)
        return any(real == w or real.startswith(w + "/") or w.startswith(real + "/")
                   for w in (os.path.realpath(os.path.expanduser(x)) for x in self.program.sandbox.writable))

    def _programs(self, env: Mapping[str, str]) -> list[StatTree]:
        """What the commands resolve through PATH: a new `python` or `git` in a folder earlier
        on PATH changes that folder's times; git and the interpreters, replaced, their own."""
        out: list[StatTree] = []
        seen = set()
        for d in env.get("PATH", "").split(os.pathsep):
            # /bin is often /usr/bin: one folder, watched once
            if d and os.path.isdir(d) and os.path.realpath(d) not in seen:
                seen.add(os.path.realpath(d))
                out.append(NameTree(Path(d), f"a folder on PATH ({d})"))
        for exe in sorted({workspace_git(), *interpreters(self.program, env)}):
            for path in dict.fromkeys([exe, os.path.realpath(exe)]):
                if os.path.exists(path):
                    out.append(StatTree(Path(path), f"the program {path}", cap=1))
        return out

    # ---- the generator ------------------------------------------------------------------------

    def wrap(self, log_dir: Path, workdir: Path | None = None):  # -> Callable[[command], command] | None
        """The sandbox command line for a generator editing `workdir` (default the run's tree)."""
        if self.sandbox is None:
            return None
        sandbox, ws = self.sandbox, self.ws
        tree = workdir or ws.path

        urls = url_rules(os.environ, self.program.generator.base_url)
        # What measurements left: the score's and the holdout's logs of every run of this
        # checkout (their output may quote `private`), the scratch they run in right now
        unseen = [self.journal.dir.parent, self._scratch]

        def wrap(command, *, readable=(), writable=(), network=None, hosts=()):  # type: ignore[no-untyped-def]
            # readable/writable/network/hosts: what an agent CLI needs (autoloop.generators.agents)
            return sandbox.argv(command, workdir=tree, writable=[log_dir, *writable],
                                readable=[ws.common_dir, *readable], network=network,
                                hosts=[*hosts, *urls], label=str(log_dir), unseen=unseen)

        return wrap

    def blocked(self, label: Path | str) -> dict[str, int]:
        """What the egress proxy refused the sandboxes of `label` (a cycle's log folder, or
        "verifier"): host:port → times, most first; forgotten once asked."""
        egress = self.sandbox.egress if self.sandbox is not None else None
        return egress.take(str(label)) if egress is not None else {}

    def before_generate(self) -> None:
        self._unchanged = {}
        self.gen_watch.capture()
        self._verify_captured = False  # a capture left by an interrupted measurement is stale
        self._killed_before = leftovers.leftovers_killed()

    def after_generate(self, changes: Sequence[Change]) -> list[str]:
        """What the generator did that the work-tree scope check does not see."""
        problems = self._outside(self.gen_watch, "")
        left = leftovers.leftovers_killed() - self._killed_before
        if left:
            # killed before anything was looked at; a process that outlives the generator could
            # change the tree after the check, so the cycle does not count
            problems.append(f"left {left} process{'es' if left > 1 else ''} running after it exited (killed)")
        else:
            # The verification trees found as the last measurement left them: the first
            # measurement starts from that proven picture (see _picture_after_reset).
            for t in self.gen_watch.trees:
                saved = self.gen_watch.saved(t)
                if t.of_verification and t.root not in self._changed_roots and saved is not None:
                    self._unchanged[t.root] = saved
        cap = self.limits.file_bytes
        full = [c.path for c in changes if cap is not None and c.after is not None and c.after.kind == "f"
                and c.after.size >= cap]
        if full:
            problems.append(f"{full[0]} reached the largest file size allowed "
                            f"(resources.max_disk_mb: {self.program.resources.max_disk_mb:g})")
        limit = self.program.resources.max_change_mb
        size = sum(c.after.size for c in changes if c.after is not None and c.after.kind == "f")
        if size > limit * MB:
            problems.append(f"the change is {size / MB:.1f} MB of files (resources.max_change_mb: {limit:g})")
        return problems

    def capture_outside(self) -> None:
        """Capture what measurements could change outside their trees, once per cycle (a round
        calls this before its measurements start); after_verify compares once, after the last."""
        if not self._verify_captured:
            self.verify_watch.capture()
            self._verify_captured = True

    def outside_clean(self) -> bool:
        """Read-only: nothing after_generate checks outside the work trees changed since
        before_generate (then a round checks its workers' trees at once)."""
        return (not self.gen_watch.changes() and leftovers.leftovers_killed() == self._killed_before
                and (self._lock_path is None or _identity(self._lock_path) == self._lock_id))

    def _outside(self, watch: Watch, when: str) -> list[str]:
        """What changed outside the work tree. Files there are not autoloop's: the only thing
        ever done to them is moving a *new* entry that would run code in every later measurement
        (an injection in a site folder, a program that appeared on PATH) into quarantine. A
        changed file that existed before cannot be put back, so the run stops and says which."""
        problems = []
        found = watch.changes()
        self._changed_roots = {ch.tree.root for ch in found}
        for ch in found:
            tree, paths = ch.tree, ch.paths
            tree.latest = None  # what is done about it below changes it: walk it afresh next time
            if tree is self._own:
                # autoloop's (and any) import writes the bytecode of a module it loads the first
                # time: that is exactly the compiled source, so it changes nothing
                paths = [rel for rel in paths if not import_wrote(tree.root, rel)]
                if not paths:
                    continue
            shown = ", ".join(paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")
            problem = f"{when}changed {tree.label}: {shown}"
            if tree in self._sites:
                problem += self._neutralize(ch, is_injection)
                old = [rel for rel in paths if rel not in ch.new and rel != "." and is_injection(rel)]
                if old:
                    self.fatal = (f"{tree.label}: {', '.join(old[:3])} changed during the run; it runs "
                                  "code at every Python start and autoloop cannot put it back — check "
                                  "it, then resume")
            elif isinstance(tree, NameTree):
                # A new program there that a measurement starts by name would shadow the real
                # one: moved aside. Other new names (your pip install) only void the cycle.
                shadows = commands_by_name(self.program)
                problem += self._neutralize(ch, lambda rel: rel in shadows and (
                    os.path.isfile(tree.root / rel) or os.path.islink(tree.root / rel)))
            elif tree is self._own:
                self.fatal = (f"autoloop's own code changed during the run ({shown}); reinstall autoloop "
                              "before going on")
            elif tree is self._pycache_tree:
                self._proven = None
                remove_tree(tree.root)  # poisoned: measure without it from now on
            elif tree in self._data:
                self.fatal = (f"the read-only data {tree.root} changed ({shown}); measurements made "
                              "before and after are not comparable — restore it, then resume")
            problems.append(problem)
        lock = self._lock_problem()
        if lock:
            problems.append(when + lock)
        return problems

    def _neutralize(self, ch: Changed, dangerous: Callable[[str], bool]) -> str:
        """Move the new top-level entries of `ch` that `dangerous` picks into
        <tag>.quarantine/<time>/ beside the work tree; the text to add to the problem."""
        kept = []
        for rel in ch.new:
            if "/" not in rel and dangerous(rel):
                path = ch.tree.root / rel
                box = self.ws.path.with_name(self.ws.path.name + ".quarantine") / time.strftime("%Y%m%d-%H%M%S")
                box.mkdir(parents=True, exist_ok=True)
                kept.append(box / str(path).strip("/").replace("/", "__"))
                try:
                    shutil.move(str(path), str(kept[-1]))
                except OSError as exc:
                    self.fatal = f"could not move {path} out of the way ({exc}); remove it, then resume"
        return f" — moved to {kept[0].parent} (move back what was yours)" if kept else ""

    def _lock_problem(self) -> str | None:
        if self._lock_path is None or _identity(self._lock_path) == self._lock_id:
            return None
        # Someone replaced or removed the lock file: another run could now take the tag. Take it
        # again; if another run already did, stop.
        self._lock_path.unlink(missing_ok=True)
        lock = FileLock(str(self._lock_path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            self.fatal = "another autoloop run took this tag's lock after it was replaced"
        self._held = lock  # keep it (and its flock) for the rest of the run
        self._lock_id = _identity(self._lock_path)
        return f"replaced the run's lock {self._lock_path.name}"

    # ---- a measurement --------------------------------------------------------------------------

    def confine(self, tree: Path, env: Mapping[str, str], show_private: bool = False) -> Confinement | None:
        """The sandbox a command measuring `tree` runs in (None: none), with `env` from
        measuring(): its scratch folder is the only place outside the tree it may write.
        `show_private`: the holdout, which reads program.md's `private` paths."""
        if self.sandbox is None:
            return None
        return tree_box(self.sandbox, self.program, tree, self.ws.common_dir, Path(env["TMPDIR"]).parent,
                        path=env.get("PATH", ""), keep=getattr(self, "_keep", ()), show_private=show_private)

    @property
    def scratch(self) -> Path:
        """Where measurements' scratch folders are made (beside the run's tree)."""
        return self._scratch

    @contextmanager
    def measuring(self, tree: Worktree, commit: str, base_env: Mapping[str, str],
                  steps: Sequence[str] = ("the steps",)) -> Iterator[dict[str, str]]:
        """The environment for measuring `commit` in `tree` (already checked out at it): data
        linked in, the tree proven to hold exactly the commit, fresh scratch folders. `steps`:
        what will run in it, in order, as after_step names them; each starts with the bytecode
        that step needed before."""
        self._local.measuring = None
        self._local.steps = list(steps) or ["the steps"]
        self._local.pictured = False
        try:
            link_data(self.program, tree.path)
            # the tree was reset to the commit (not cleaned): a picture of it shows what git
            # clean would remove, and is then the proof that it holds exactly the commit
            saved = self._unchanged.pop(tree.path, None)
            picture = (saved is not None and tree.picture_after_reset(saved, commit)) or \
                StatTree.verification(tree.path).take()
            removed = tree.remove_untracked(picture, commit, self._data_paths())
            if removed:
                under = tuple(rel + "/" for rel in removed)
                picture = {rel: st for rel, st in picture.items() if rel not in removed and not rel.startswith(under)}
            if tree.differs_from(commit, picture):
                tree.checkout(commit)  # something raced our checkout: once more, then no more
                link_data(self.program, tree.path)
                bad = tree.differs_from(commit)
                if bad:
                    raise Tampered("the verification tree does not hold the candidate: " + ", ".join(bad[:5]))
            with self._warm_lock:
                cache = self._proven_cache(base_env)
            self.capture_outside()
            self._local.measuring = (tree, commit)
            keys = self.sandbox is None or self.program.verifier.network   # (envs.measurement_env)
            with envs.measurement_env(base_env, parent=self._scratch, untrusted=self.untrusted, credentials=keys) as env:
                prefix = Path(env["PYTHONPYCACHEPREFIX"])
                if cache is not None:
                    with self._warm_lock:
                        cache.seed(prefix, self._local.steps[0])
                self._local.prefix = (prefix, cache)
                try:
                    yield env
                except BaseException:
                    if cache is not None:
                        cache.forget(prefix)
                    raise
                self.learn_bytecode(cache, prefix)
        finally:
            self._local.measuring = None
            self._local.prefix = None
            if not self._local.pictured:
                # the generators' watch starts the next cycle from the tree as this left it
                self._tree_watch(tree).take()

    def seed_bytecode(self, prefix: Path, step: str) -> ProvenCache | None:
        """Fill `prefix`, a score's or verifier.inputs' own fresh one, from autoloop's bytecode
        cache (what `step` needed before) once a measurement has made it; learn_bytecode after
        the step. Without it those Pythons compiled every import anew at each run (0.2 s each on
        a traced benchmark)."""
        with self._warm_lock:
            cache = self._proven if self._warm_built else None
            if cache is not None:
                cache.seed(prefix, step)
        return cache

    def learn_bytecode(self, cache: ProvenCache | None, prefix: Path) -> None:
        """After a step run in `prefix` (seeded from `cache`): what it compiled, into the cache."""
        if cache is not None:
            with self._warm_lock:
                if self._proven is cache and cache.learn(prefix):
                    # our own additions are not a change by anyone else
                    self.gen_watch.refresh(self._pycache_tree)
                    self.verify_watch.refresh(self._pycache_tree)

    def _tree_watch(self, tree: Worktree) -> StatTree:
        """The generators' watch of a verification tree: the next capture starts at its picture."""
        for t in self.gen_watch.trees:
            if t.carried and t.root == tree.path:
                return t
        return StatTree.verification(tree.path)

    def _proven_cache(self, base_env: Mapping[str, str]) -> ProvenCache | None:
        """autoloop's bytecode cache, made at the first measurement for the Pythons the commands
        start; None when there is none (or it was dropped)."""
        if self._warm_built:
            return self._proven
        self._warm_built = True
        exes = interpreters(self.program, base_env, shebangs=True)
        if not exes:
            return None
        if self._warm_dir.exists():
            remove_tree(self._warm_dir)
        self._warm_dir.mkdir(parents=True)
        cache = ProvenCache(self._warm_dir, exes, envs.scrubbed(base_env, scratch=self._scratch / "pycache-env"))
        if not cache.usable:
            return None
        # from now on the warm cache is watched like the rest of the trusted base
        self._pycache_tree = StatTree(self._warm_dir, "autoloop's bytecode cache", carried=True)
        self.gen_watch.add(self._pycache_tree)
        self.verify_watch.add(self._pycache_tree)
        self._proven = cache
        return cache

    def after_step(self, step: str) -> None:
        """After each guard and the verifier: raise Tampered if the step changed the candidate's
        files or planted code that a later step would run."""
        measuring = getattr(self._local, "measuring", None)
        if measuring is None:
            return
        tree, commit = measuring
        # one walk: the proof, the planted-code check, and the generators' next starting point
        picture = self._tree_watch(tree).take()
        self._local.pictured = True
        bad = tree.differs_from(commit, picture)
        if bad:
            raise Tampered(f"{step} changed files of the candidate while it was measured: " + ", ".join(bad[:5]))
        tracked = tree.tracked_names(commit)
        # what a later step would run without naming it: conftest.py, *customize.py, .pth
        # files, shadows of a protected module
        planted = sorted(rel for rel in picture.keys() - tracked.names() if rel and (
            rel.rpartition("/")[2] in IMPLICIT_FILES or rel.endswith(".pth")
            or (self._shadow is not None and self._shadow.fullmatch(rel))))
        if planted:
            raise Tampered(f"{step} left code that a later step would run: " + ", ".join(planted[:5]))
        # A guard runs the candidate's code, which may write bytecode (unchecked-hash, trusted over
        # its source) for a module the verifier imports: the next step gets a freshly seeded prefix.
        held = getattr(self._local, "prefix", None)
        if held is not None:
            prefix, cache = held
            self.learn_bytecode(cache, prefix)
            remove_tree(prefix)
            prefix.mkdir()
            steps: list[str] = self._local.steps
            following = steps[steps.index(step) + 1:] if step in steps else [f"after {step}"]
            if cache is not None and following:   # after the last step: no copy that nothing reads
                with self._warm_lock:
                    cache.seed(prefix, following[0])

    def reseal(self, tree: Worktree, commit: str) -> None:
        """Before the next step of a measurement: `tree` holds exactly `commit` again, proven
        (Worktree.reseal), starting from the walk after_step just took. Raises Tampered when it
        cannot be made so."""
        # the walk after_step just took; the next after_step walks again for the generators' watch
        bad = tree.reseal(commit, self._data_paths(), self._tree_watch(tree).latest)
        if bad:
            raise Tampered("the verification tree could not be made the candidate's commit again "
                           "between two steps: " + ", ".join(bad[:5]))

    def _data_paths(self) -> frozenset[str]:
        return data_paths(self.program)

    def after_verify(self) -> list[str]:
        """Everything a measurement could have reached that the generator's checks cover, again."""
        problems = []
        changed = self.sentinel.changed()
        if changed:
            problems.append("during verification: changed " + ", ".join(changed) + " (git's or the run's own files)")
            self.sentinel.restore()
        if self.journal.tampered():
            problems.append("during verification: changed the ledger")
            self.journal.repair()
        # experiments.md and results.tsv are shared by the runs of all tags next to this
        # program (each renders its own): put ours back, without blame
        if not self.journal.rendered_ok(self.program.goal):
            self.journal.render(self.program.goal)
        if self.ws.dotgit_tampered():
            problems.append("during verification: changed the work tree's .git link")
            self.ws.restore_dotgit()
        if self._verify_captured:  # nothing was measured (a skipped re-measurement): nothing to compare
            problems += self._outside(self.verify_watch, "during verification: ")
            self._verify_captured = False
        return problems

    def check_keep(self, commit: str, measured: str) -> None:
        """The commit about to become the incumbent has exactly the tree that was measured."""
        if self.ws.tree_of(commit) != self.ws.tree_of(measured):
            raise RunFailure(f"internal error: commit {commit[:12]} does not have the tree of the measured "
                             f"candidate {measured[:12]}; nothing was kept")

    def raise_if_fatal(self) -> None:
        if self.fatal:
            raise RunFailure(self.fatal)


def refuse_writable_pythons(program: Program) -> None:
    """ConfigError (exit 2) when a `sandbox.writable` path holds, or lies in, a Python the
    measurements or the score run (its installation, its venv, its site folders) or autoloop's
    own code: a step of a measurement — the candidate's code under a guard — could write a
    start-up hook there, and the score, which runs none of the candidate's files, would run it."""
    if not program.sandbox.writable:
        return
    import site

    import autoloop

    env = envs.scrubbed(os.environ, scratch=Path(tempfile.mkdtemp(prefix="autoloop-sites-")))
    try:
        exes = [e for e in interpreters(program, env, shebangs=True, defaults=True) if e]
        # not the user sites: every measurement and the score run with PYTHONNOUSERSITE=1 (and
        # autoloop's own, which $PYTHONUSERBASE may put anywhere, is watched by the run)
        users = [Path(os.path.realpath(site.getuserbase())), Path.home() / ".local"]
        trusted = [Path(os.path.realpath(p)) for p in site_dirs(exes, env)
                   if not any(Path(os.path.realpath(p)).is_relative_to(u) for u in users)]
        for exe in [*exes, sys.executable]:
            real = Path(os.path.realpath(exe))
            trusted.append(real)   # the interpreter itself
            trusted += [Path(os.path.realpath(d)) for d in (Path(exe).parent.parent, real.parent.parent)
                        if (d / "pyvenv.cfg").is_file()]   # its venv, whole
        trusted.append(Path(autoloop.__file__).resolve().parent)
    finally:
        remove_tree(Path(env["TMPDIR"]).parent, quiet=True)
    for i, w in enumerate(program.sandbox.writable):
        full = Path(os.path.realpath(os.path.expanduser(w)))
        hit = next((t for t in trusted if t.is_relative_to(full) or full.is_relative_to(t)), None)
        if hit is not None and str(hit) != "/":
            line = program.lines.get(f"sandbox.writable[{i}]", program.line("sandbox"))
            raise ConfigError(f"{program.path.name}:{line}: sandbox.writable[{i}]: '{w}' overlaps {hit}, part of a "
                              "Python the measurements or the score run: a candidate's code could change what the "
                              "score runs; keep the Python (and its venv) outside sandbox.writable, or name a "
                              "narrower folder")


def data_paths(program: Program) -> frozenset[str]:
    """The data links in a verification tree, and the folders above them."""
    out: set[str] = set()
    for d in program.data:
        parts = d.target.strip("/").split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


def link_data(program: Program, tree: Path) -> None:
    """Each `data:` source appears at its place in `tree` (a link; one already there is kept)."""
    for d in program.data:
        link = tree / d.target
        if link.is_symlink() and os.readlink(link) == str(d.source):
            continue
        remove_tree(link, quiet=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(d.source, link)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None
