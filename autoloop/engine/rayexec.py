"""`parallel.executor: ray`: a lane ships the commit as a tar (a Ray object, put once per
commit) to a task that runs the same steps in a temporary folder (autoloop.engine.ray_task),
sandboxed there as a local measurement is; its output's tails come back as local logs. With
`verifier.score` the verifier's $AUTOLOOP_OUTPUT comes back too (autoloop.engine.rayfetch) and
the score runs here, on this machine, where the start commit's tree and the private paths are."""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import os
import stat
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import autoloop
from autoloop.process import proc, running
from autoloop.engine import ray_task
from autoloop.engine import rayfetch
from autoloop.engine import rayout
from autoloop.engine import reads
from autoloop.errors import ClusterLost, ConfigError, Interrupted, NodeLost, UsageError
from autoloop.engine.hints import plain
from autoloop.isolation.hardening import Guardrails
from autoloop.program.reader import Program
from autoloop.isolation.sandbox import checkout_keep
from autoloop.engine.score import Scorer, start_scorer
from autoloop.base.specs import SandboxSpec
from autoloop.base.walk import walk
from autoloop.engine.verify import OUTPUT_VAR, SEED_VAR, Measurement, new_seed, steps, summarize
from autoloop.git.workspace import Workspace

# Output brought back from a remote run: enough for any metric line and a failure's last words.
REMOTE_TAIL_BYTES = 4 << 20
RAY_EXTRA = "pip install 'autoloop-ratchet[ray]'"
_RAY_TEMP_MAX = 30   # characters of TMPDIR/ray that leave room for Ray's session and socket names
DATA_SHIP_MB = 256   # program.md `data:` travels to the nodes as one object: at most this much


class RayLane:
    """One comparison at a time, on one node: `prepare` starts a comparison (a cycle's
    measurement, the calibration, the end-of-run check), its first run goes to the node the
    executor picks, and every further run of it is pinned there (NodeAffinitySchedulingStrategy,
    soft=False): a pair never mixes two machines' speeds."""

    def __init__(self, ex: RayExecutor, k: int) -> None:
        self.ex, self.k = ex, k
        self.refs: dict[str, Any] = {}
        self.node: Node | None = None      # where the current comparison runs

    def prepare(self, sides: Mapping[str, str]) -> None:
        self.refs = {side: self.ex.put(commit) for side, commit in sides.items()}
        self.node = self.ex.place(self)

    def record_reads(self, program: Program, commit: str, *, env: Mapping[str, str], log_dir: Path,
                     marker: str) -> reads.Reads:
        return reads.Reads("", note="not recorded: the measurements run on Ray nodes")

    def measure(self, program: Program, side: str, *, env: Mapping[str, str], log_dir: Path,
                marker: str, with_guards: bool, seed: int | Callable[[], int] | None = None,
                holdout: bool = False, hints: bool = True, check: bool = True) -> Measurement:
        # a fresh folder unpacked from the commit on the node for every step: nothing to re-prove
        # there; here, the places the guardrails watch must still not change meanwhile
        self.ex.guard.capture_outside()
        todo = steps(program, with_guards)
        # the node's own environment, plus ours that mean something there: not our PATH or HOME
        shipped = {k: val for k, val in env.items() if k.startswith("AUTOLOOP_") or k in self.ex.hint_keys}
        shipped[running.MARKER_VAR] = marker
        assert self.node is not None
        reap = program.verifier.measure == "cpu"
        runs: list[ray_task.RemoteRun] = []
        guards = [s for s in todo if s.guard]
        if guards:
            # the guards first, with a seed of their own: the measurement's is drawn once they
            # have finished, so nothing they ran could know it (contract §11)
            reply = self.ex.call(self.refs[side], guards, {**shipped, SEED_VAR: str(new_seed())}, self.node, reap)
            if isinstance(reply, str):
                return Measurement(None, (), f"ray: {plain(reply)}", None, 0.0)
            runs += reply.runs
        # verifier.score: the command produces on the node, its output comes back here, the score
        # runs here (never on a node: its tree and the private paths stay on this machine)
        scored = program.verifier.score is not None and not holdout
        output = self.ex.output_dir(self.k) if scored else None
        if len(runs) == len(guards) and all(r.result.ok for r in runs):
            seed = seed() if callable(seed) else new_seed() if seed is None else seed
            reply = self.ex.call(self.refs[side], todo[len(guards):], {**shipped, SEED_VAR: str(seed)},
                                 self.node, reap, output)
            if isinstance(reply, str):
                return Measurement(None, (), f"ray: {plain(reply)}", None, 0.0, seed)
            runs += reply.runs
        else:
            seed = None
        log_dir.mkdir(parents=True, exist_ok=True)
        results = []
        for step, run in zip(todo, runs):
            stem = log_dir / step.log_name
            out, err = stem.with_name(stem.name + ".out"), stem.with_name(stem.name + ".err")
            out.write_bytes(run.stdout)
            err.write_bytes(run.stderr + f"\n[autoloop: ran on {reply.host} (Ray node {reply.node_id}); "
                            f"{run.stdout_size} bytes of stdout in all]\n".encode())
            results.append(dataclasses.replace(run.result, stdout_path=out, stderr_path=err))
        score = None
        if scored and seed is not None and len(results) == len(todo) and results[-1].ok and (
                check or program.verifier.measure == "output"):
            assert output is not None and not isinstance(reply, str)
            score = self._score(reply, output, {**env, SEED_VAR: str(seed), OUTPUT_VAR: str(output)},
                                log_dir, marker)
        m = summarize(program, todo, results, score=score)
        return m if seed is None else dataclasses.replace(m, seed=seed)

    def _score(self, reply: ray_task.RemoteReply, output: Path, env: Mapping[str, str], log_dir: Path,
               marker: str) -> proc.ProcResult | str:
        """`verifier.score` here, on what came back of the node's $AUTOLOOP_OUTPUT (already in
        `output`), or why it is not run."""
        got = reply.output
        if got is None:
            return "did not run: nothing came back of $AUTOLOOP_OUTPUT from the Ray node"
        if got.odd is not None:
            return (f"not run: ${OUTPUT_VAR} {got.odd}; the command must write plain files into the "
                    "folder, within parallel.max_output_mb (a link could point the score at what the "
                    "candidate cannot read)")
        scorer = self.ex.scorer()
        assert scorer is not None
        return scorer(env, output, log_dir, marker)

    def lose(self, exc: NodeLost) -> None:   # its node failed under a measurement: never again
        self.ex.lose(exc)
        self.node = None

    def where(self) -> dict[str, str] | None:
        """The ledger's record of the node the current comparison ran on."""
        return None if self.node is None else {"ray_node": self.node.id, "host": self.node.host}


@dataclasses.dataclass(frozen=True)
class Node:
    id: str
    host: str


def _infrastructure(exc: BaseException) -> bool:
    """A failure of the cluster, not of the candidate: its node or worker died, its object or
    its owner was lost, its runtime env could not be set up, its pinned node vanished."""
    from ray import exceptions as rx

    kinds = tuple(k for k in (getattr(rx, n, None) for n in INFRA_ERRORS) if isinstance(k, type))
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return True
        seen = getattr(seen, "cause", None) if isinstance(seen, rx.RayTaskError) else None
    return False


INFRA_ERRORS = ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
                "ObjectFetchTimedOutError", "ObjectReconstructionFailedError", "RuntimeEnvSetupError",
                "TaskUnschedulableError", "LocalRayletDiedError", "RaySystemError", "ActorDiedError")


class RayExecutor:
    def __init__(self, program: Program, ws: Workspace, lanes: int, guard: Guardrails) -> None:
        self.program, self.ws, self.guard = program, ws, guard
        self.spec = program.parallel
        self.hint_keys = frozenset(k for env in self.spec.env for k in env)
        self.lanes = [RayLane(self, k) for k in range(lanes)]
        self._cache: dict[str, Any] = {}           # commit -> ObjectRef of its tar
        self._lock = threading.Lock()
        self._running: set[Any] = set()
        self._cancelled = False
        self._ray: Any = None
        self._task: Any = None
        self.sandbox: SandboxSpec | None = None    # what every measurement on a node runs in
        self.unsandboxed: str | None = None        # why, under `sandbox: auto`, none does
        self.lost: dict[str, str] = {}             # node id -> host: nodes that failed a measurement
        # the strict rule compares with a stored number: it is only comparable on the node that
        # measured it, so every measurement of a strict run stays on the baseline's node
        self.home: Node | None = None
        self.one_node = program.accept.rule != "paired"
        self.description = ""                      # the start line's "verifying on Ray at ...: N nodes, ..."
        self.log_path: Path | None = None          # Ray's own output (autoloop.engine.rayout)
        self.log_dir = program.state_dir / ".autoloop"   # the run's own folder, once known
        self._scorer: Scorer | None = None
        self._produce: Any = None
        self._stream: dict[str, Any] = {}
        self._data: Any = None                     # the ObjectRef of program.md's `data:` folders, as a tar
        self.output_limit = int(self.spec.max_output_mb * ray_task.MB)

    def start(self) -> None:
        import ray

        address = self.spec.address
        # autoloop travels with the job: the cluster's nodes need Ray and Python, not autoloop
        kw: dict[str, Any] = dict(ignore_reinit_error=True, logging_level=logging.ERROR, log_to_driver=False,
                                  runtime_env={"py_modules": [autoloop]})
        if address is None:
            # a private local instance: enough CPUs for every lane, Ray's own GPU detection
            cpus = self.spec.num_cpus if self.spec.num_cpus is not None else 1.0
            kw.update(num_cpus=max(1, math.ceil(cpus * len(self.lanes))), include_dashboard=False)
            # Ray's unix sockets live under TMPDIR/ray/session_…/sockets/ and a socket's path has
            # at most 107 bytes: a long TMPDIR (macOS's, a test's) fails there; /tmp/ray is Ray's own
            ray_tmp = os.path.join(tempfile.gettempdir(), "ray")
            if len(ray_tmp) > _RAY_TEMP_MAX and os.access("/tmp", os.W_OK):
                kw["_temp_dir"] = "/tmp/ray"
        else:
            kw["address"] = address
        opts: dict[str, Any] = {"max_retries": 0, **{k: v for k, v in (
            ("num_cpus", self.spec.num_cpus), ("num_gpus", self.spec.num_gpus),
            ("accelerator_type", self.spec.accelerator_type)) if v is not None}}
        if self.spec.resources:
            opts["resources"] = dict(self.spec.resources)
        self._opts = opts
        self.log_path = self.log_dir / "ray.log"
        try:
            rayout.init(ray, kw, self.log_path)
            self._ray = ray
            self._sandbox_on_nodes(ray.remote(ray_task.probe).options(**opts))
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
            self.close()
            raise UsageError(f"{self.program.path.name}:{self.program.line('parallel.address')}: parallel.address: "
                             f"cannot start or reach Ray ({address or 'local instance'}): "
                             f"{rayout.reason(exc, self.log_path)}") from None
        if self.sandbox is None and self.program.private and self.unsandboxed:
            self.close()
            raise ConfigError(self.unsandboxed)
        self._task = ray.remote(ray_task.run_steps)
        # a generator task: the output's chunks are made on the node as they are taken here
        self._produce = ray.remote(ray_task.produce)
        # at most a few chunks wait in the node's object store for us to take them (Ray >= 2.10)
        self._stream = {"num_returns": "streaming", "_generator_backpressure_num_objects": 4}
        try:
            self._produce.options(**self._stream)
        except Exception:   # an older Ray without that option
            self._stream = {"num_returns": "streaming"}
        nodes = self.nodes()
        if not nodes:
            raise UsageError(f"{self.program.path.name}:{self.program.line('parallel')}: parallel: no node of the "
                             f"Ray cluster has what a verification task asks for ({self._asks()})")
        self.description = self._describe(nodes, address)
        self._data = self._ship_data()

    def _ship_data(self) -> Any:
        """program.md's `data:` folders as one Ray object (put once per run; None without any):
        a node has none of this machine's paths, so each measurement's tree gets them unpacked
        at their places (never a `private` path: the schema keeps the two apart). At most
        DATA_SHIP_MB, else ConfigError naming the key."""
        if not self.program.data:
            return None
        # counted before anything is read: a data set of many GB is refused, not loaded
        size = sum(d.source.stat().st_size if d.source.is_file() else
                   sum(st.st_size for _, _, st in walk(str(d.source)) if st is not None and stat.S_ISREG(st.st_mode))
                   for d in self.program.data)
        if size > DATA_SHIP_MB * ray_task.MB:
            self.close()
            raise ConfigError(f"{self.program.path.name}:{self.program.line('data')}: data: "
                              f"{size / ray_task.MB:.0f} MB, more than the {DATA_SHIP_MB} MB parallel.executor: ray "
                              "ships to its nodes with every run; keep large data sets where the nodes read them "
                              "(a shared file system) and read them from there, or use parallel.executor: local")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in self.program.data:
                tar.add(str(d.source), arcname=d.target)
        return self._ray.put(buf.getvalue())

    def _asks(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self._needs().items())

    def _needs(self) -> dict[str, float]:
        needs = {"CPU": 1.0 if self.spec.num_cpus is None else self.spec.num_cpus}
        if self.spec.num_gpus:
            needs["GPU"] = self.spec.num_gpus
        if self.spec.accelerator_type is not None:
            needs[f"accelerator_type:{self.spec.accelerator_type}"] = 0.001
        needs.update(self.spec.resources)
        return needs

    def nodes(self) -> list[dict[str, Any]]:
        """The live nodes that can run a verification task, by Ray's own account."""
        needs = self._needs()
        return [n for n in self._ray.nodes()
                if n.get("Alive") and all((n.get("Resources") or {}).get(k, 0.0) >= v for k, v in needs.items())]

    def _describe(self, nodes: list[dict[str, Any]], address: str | None) -> str:
        every = [n for n in self._ray.nodes() if n.get("Alive")]
        cpus = sum((n.get("Resources") or {}).get("CPU", 0.0) for n in every)
        gpus = sum((n.get("Resources") or {}).get("GPU", 0.0) for n in every)
        at = f"at {address}" if address is not None else "(a private local instance)"
        fit = "" if len(nodes) == len(every) else f" ({len(nodes)} of them fit parallel:)"
        box = "sandboxed on the nodes" if self.sandbox is not None else "not sandboxed"
        return (f"verifying on Ray {at}: {len(every)} node{'s' * (len(every) != 1)}{fit}, "
                f"{cpus:g} CPU{'s' * (cpus != 1)}, {gpus:g} GPU{'s' * (gpus != 1)}, {box}")

    def place(self, lane: RayLane) -> Node:
        """The node of a lane's next comparison: for the strict rule the baseline's; else the
        live fitting node with the fewest of our lanes on it (rounds spread over the cluster),
        never one that failed a measurement. ClusterLost when there is none."""
        with self._lock:
            if self.one_node and self.home is not None:
                if self.home.id in self.lost:
                    raise ClusterLost(f"Ray node {self.home.host} ({self.home.id[:12]}), where every measurement of "
                                      "this accept.rule: strict run is compared, was lost; the stored numbers are "
                                      "not comparable on another node (accept.rule: paired measures on any)")
                return self.home
        try:
            fit = [n for n in self.nodes() if n["NodeID"] not in self.lost]
        except Exception as exc:   # the cluster itself is gone (its GCS does not answer)
            raise ClusterLost(f"the Ray cluster does not answer: {rayout.reason(exc, self.log_path)}") from None
        if not fit:
            raise ClusterLost("no node of the Ray cluster is left that can measure"
                              + (f" ({len(self.lost)} lost: {', '.join(sorted(set(self.lost.values())))})"
                                 if self.lost else ""))
        with self._lock:
            busy = {id(other): other.node.id for other in self.lanes if other is not lane and other.node is not None}
            load = {n["NodeID"]: sum(1 for v in busy.values() if v == n["NodeID"]) for n in fit}
            pick = min(fit, key=lambda n: (load[n["NodeID"]], (fit.index(n) - lane.k) % len(fit)))
            node = Node(pick["NodeID"], str(pick.get("NodeName") or pick.get("NodeManagerHostname") or "?"))
            if self.one_node and self.home is None:
                self.home = node
        return node

    def resume_on(self, where: Mapping[str, str] | None) -> None:
        """A resumed strict run goes on where its stored numbers were measured (`where`, the
        baseline's node in the ledger): that node, or, since a restarted node comes back under a
        new id, a fitting node on the same host. ClusterLost when neither is in the cluster."""
        if not self.one_node or not where or not where.get("ray_node"):
            return
        try:
            fit = self.nodes()
        except Exception as exc:
            raise ClusterLost(f"the Ray cluster does not answer: {rayout.reason(exc, self.log_path)}") from None
        same = [n for n in fit if n["NodeID"] == where["ray_node"]] or \
               [n for n in fit if where.get("host") in (n.get("NodeName"), n.get("NodeManagerHostname"))]
        if not same:
            raise ClusterLost(f"Ray node {where.get('host', '?')} ({where['ray_node'][:12]}), where this "
                              "accept.rule: strict run's stored numbers were measured, is not in the cluster; "
                              "they are not comparable on another node: bring that machine back, or start a new "
                              "--tag (accept.rule: paired measures on any node)")
        pick = same[0]
        with self._lock:
            self.home = Node(pick["NodeID"], str(pick.get("NodeName") or pick.get("NodeManagerHostname") or "?"))

    def lose(self, exc: NodeLost) -> None:
        """Never use the node of `exc` again; ClusterLost when no node is left to measure on."""
        if exc.node_id is not None:
            with self._lock:
                self.lost[exc.node_id] = exc.host or "?"
        if self.one_node and self.home is not None and self.home.id in self.lost:
            self.place(self.lanes[0])   # raises, saying why a strict run cannot move
        try:
            left = [n for n in self.nodes() if n["NodeID"] not in self.lost]
        except Exception as e:
            raise ClusterLost(f"the Ray cluster does not answer: {rayout.reason(e, self.log_path)}") from None
        if not left:
            raise ClusterLost(f"no node of the Ray cluster is left that can measure (lost: "
                              f"{', '.join(f'{h} ({i[:12]})' for i, h in sorted(self.lost.items()))})")

    def _sandbox_on_nodes(self, probe: Any) -> None:
        """Under `auto` the answer of one node decides for the whole run: a sandbox for every
        measurement (on a node that cannot make one the measurement then crashes, saying why), or
        none, said as a local run says it. `bwrap` needs one everywhere, without asking first."""
        p = self.program
        if p.sandbox.kind == "none":
            return
        wanted = dataclasses.replace(p.sandbox, kind="bwrap", network=p.verifier.network, hosts=p.verifier.hosts)
        if p.sandbox.kind == "auto":
            host, why = self._ray.get(probe.remote(wanted, dict(self.spec.worker_env(0))))
            if why is not None and p.private:
                # a node sharing this file system would show them to the candidate's code
                self.unsandboxed = (f"{p.path.name}:{p.line('private')}: private: needs a sandbox on the Ray "
                                    f"nodes too, and none can be made on {host} ({why}); make bubblewrap work "
                                    "there, or remove private")
                return
            if why is not None:
                self.unsandboxed = f"on the Ray node {host}: {why}"
                return
        self.sandbox = wanted

    def lane(self, k: int) -> RayLane:
        return self.lanes[k]

    def scorer(self) -> Scorer | None:
        """As LocalExecutor.scorer: the score runs on this machine, in its sandbox."""
        with self._lock:
            if self._scorer is None:
                self._scorer = start_scorer(self.ws, self.guard)
            return self._scorer

    def output_dir(self, k: int) -> Path:
        """Where lane `k`'s verifier's $AUTOLOOP_OUTPUT comes back to (emptied by each call)."""
        return self.guard.scratch / f"ray-output-{k}"

    def where_steps(self) -> str:
        """Where each step of a measurement runs (`doctor`, the docs)."""
        box = "sandboxed there" if self.sandbox is not None else "not sandboxed"
        if self.program.verifier.score is None:
            return f"guards and verifier on the nodes ({box})"
        n = len(self.program.private)
        return (f"produce on the nodes ({box}), score here (private: {n} path{'s' * (n != 1)}); "
                f"at most parallel.max_output_mb ({self.spec.max_output_mb:g}) of $AUTOLOOP_OUTPUT comes back")

    def node_facts(self, timeout: float = 120.0) -> list[tuple[dict[str, Any], ray_task.NodeFacts | str]]:
        """Every live node (Ray's record) with what it says of itself (Ray and Python versions,
        bubblewrap), or why it did not answer: `autoloop doctor`'s view of the cluster."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        wanted = dataclasses.replace(self.program.sandbox, kind="bwrap", network=self.program.verifier.network,
                                     hosts=self.program.verifier.hosts)
        fn = self._ray.remote(ray_task.facts)
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        refs = [fn.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(wanted, dict(self.spec.worker_env(0))) for n in nodes]
        out: list[tuple[dict[str, Any], ray_task.NodeFacts | str]] = []
        for n, ref in zip(nodes, refs):
            try:
                out.append((n, self._ray.get(ref, timeout=timeout)))
            except Exception as exc:
                out.append((n, rayout.reason(exc, self.log_path)))
        return out

    def put(self, commit: str) -> Any:
        with self._lock:
            ref = self._cache.get(commit)
        if ref is None:
            ref = self._ray.put(self.ws.archive(commit))
            with self._lock:
                if len(self._cache) > 32:      # old incumbents and candidates: let Ray free them
                    self._cache.clear()
                self._cache[commit] = ref
        return ref

    def call(self, archive_ref: Any, todo: list[proc.Step], env: dict[str, str],
             node: Node, reap: bool = False,
             output: Path | None = None) -> ray_task.RemoteReply | str:   # or why there is no reply
        """`todo` on `node`; with `output` (verifier.score), what the verifier wrote under
        $AUTOLOOP_OUTPUT there is unpacked into `output` here (rayfetch)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        checkout = (str(self.program.repo_root), tuple(map(str, checkout_keep(self.program))))
        task = self._task if output is None else self._produce
        opts = dict(self._opts) if output is None else {**self._opts, **self._stream}
        pinned = task.options(**opts, scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False))
        hidden = tuple(map(str, self.program.private))   # names to hide there, never their content
        args: tuple[Any, ...] = (archive_ref, todo, env, REMOTE_TAIL_BYTES, self.sandbox, checkout, reap, hidden,
                                 self._data)
        try:
            ref = pinned.remote(*args) if output is None else pinned.remote(*args, self.output_limit)
        except Exception as exc:   # the archive's object is gone, the cluster does not answer
            raise NodeLost(rayout.reason(exc, self.log_path), node.id, node.host) from None
        with self._lock:
            self._running.add(ref)
        try:
            if output is None:
                while True:
                    if self._cancelled:
                        raise Interrupted("interrupted")
                    done, _ = self._ray.wait([ref], timeout=0.2)
                    if done:
                        break
            try:
                if output is not None:
                    return rayfetch.receive(self._ray, ref, output, self.output_limit, lambda: self._cancelled)
                return self._ray.get(ref)
            except Interrupted:
                raise
            except Exception as exc:
                if self._cancelled:
                    raise Interrupted("interrupted") from None
                why = rayout.reason(exc, self.log_path)
                if _infrastructure(exc):
                    raise NodeLost(why, node.id, node.host) from None
                # anything else the task raised: the candidate's run is a crash, saying why
                return why
        finally:
            with self._lock:
                self._running.discard(ref)

    def cancel(self) -> None:
        self._cancelled = True
        with self._lock:
            refs = list(self._running)
        for ref in refs:
            try:
                self._ray.cancel(ref)   # not force: the task kills its verifier's group first
            except Exception:
                pass

    def close(self) -> None:
        if self._ray is not None:
            with rayout.quiet(self.log_path):
                self._ray.shutdown()
            self._ray = None
        rayout.restore()
