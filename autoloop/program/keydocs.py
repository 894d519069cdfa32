"""What each program.md key means, for the reference page scripts/docs_reference.py writes
(docs/reference/program.md): its type, one description, what leaving it out means when it has
no default value, and an example. Data only, no imports.

Every key of the schema (autoloop.program.schema.known_keys) needs an entry here: the script
refuses to write the page, naming the key, when one has none, and a test runs the script, so a
new key cannot reach the docs without a description.
"""

from __future__ import annotations

from typing import NamedTuple


class KeyDoc(NamedTuple):
    type: str
    text: str
    example: str
    unset: str = ""   # what leaving the key out means, for a key without a default value


KEYS: dict[str, KeyDoc] = {
    "goal": KeyDoc("text, one line", "What the run is for, in one sentence; the generator sees it in every "
                   "prompt, and the log and report show it.", "goal: Make word_counts faster",
                   "required"),
    "allowed": KeyDoc("list of paths or globs (a string is a one-item list)",
                      "The only paths the generator may create, change or delete. Anything else it "
                      "changes makes the cycle a violation.", 'allowed: ["src/**"]', "required"),
    "forbidden": KeyDoc("list of paths or globs", "Never editable, even where `allowed` matches (the tests, "
                        "the benchmark).", 'forbidden: ["tests/**", "bench/**"]', "nothing beyond what is "
                        "always protected (program.md, the journal, `.git`, the verifier's and guards' files)"),
    "verifier": KeyDoc("mapping", "The read-only judge: the command that measures a candidate, and how its "
                       "number is read.", "verifier: {command: python bench.py, metric: seconds, "
                       "direction: minimize}", "required"),
    "verifier.command": KeyDoc("shell command", "Run by a shell from the root of a private tree of the "
                               "candidate's commit.", "command: python prepare.py --eval", "required"),
    "verifier.metric": KeyDoc("name (letters, digits, `_ . -`)", "With `measure: output`, the last "
                              "`NAME: NUMBER` (or `NAME=NUMBER`) line of the output is the metric; with "
                              "`wall`/`cpu`, only the name the seconds are recorded under.",
                              "metric: val_loss", "required unless `pattern` is given"),
    "verifier.pattern": KeyDoc("regular expression", "Instead of `metric`: the first group of the "
                               "expression's last match in the output is the number.",
                               "pattern: 'accuracy ([0-9.]+)%'", "`metric` is used"),
    "verifier.direction": KeyDoc("`minimize` or `maximize`", "Which way is better. `measure: wall` and "
                                 "`cpu` need `minimize`.", "direction: minimize", "required"),
    "verifier.timeout": KeyDoc("seconds (> 0)", "A measurement running longer is killed and the cycle is "
                               "a crash.", "timeout: 600"),
    "verifier.repeats": KeyDoc("integer >= 1", "Strict rule: runs of each candidate (and of the start); "
                               "their median counts.", "repeats: 3"),
    "verifier.network": KeyDoc("boolean", "Measurements get a way out through autoloop's egress proxy, "
                               "to the hosts of `verifier.hosts` only (sandboxed, they have none "
                               "otherwise).", "network: true"),
    "verifier.inputs": KeyDoc("shell command", "With `score`: runs where the score runs (the start "
                              "commit's tree, sandboxed), before `command` and outside its timing, and "
                              "draws the measurement's inputs from `$AUTOLOOP_SEED`; what it prints is "
                              "`command`'s standard input and the score's `$AUTOLOOP_INPUTS` (both runs "
                              "of a pair share it). `init --trace` writes it.",
                              "inputs: python bench/score.py --inputs",
                              "the command draws its own inputs, inside its timing"),
    "verifier.hosts": KeyDoc("list of hosts (`host`, `host:port`, `*.domain`, an address)",
                             "With `network: true`: the hosts a measurement may reach through the "
                             "egress proxy; a name alone means ports 443 and 80.",
                             "hosts: [huggingface.co]", "none: with the network on, nothing is reachable"),
    "verifier.measure": KeyDoc("`output`, `wall` or `cpu`", "`output`: the number is read from the "
                               "output. `wall`/`cpu`: autoloop times the command itself (wall seconds "
                               "until its last process ends, or CPU seconds of every process it "
                               "started) and reads none of its output.", "measure: wall"),
    "verifier.score": KeyDoc("shell command", "Runs after `command`, as its own process in a tree of the "
                             "run's start commit (no candidate code), on what `command` wrote to "
                             "`$AUTOLOOP_OUTPUT`: with `output` it prints the metric, with `wall`/`cpu` "
                             "it passes or fails the results.", "score: python bench/score.py",
                             "no check of the results"),
    "guards": KeyDoc("list of commands or mappings", "Each must exit 0 for a candidate to be kept; a failing "
                     "one makes the cycle a `guard_fail`.", "guards: [python -m pytest -q]", "no guard"),
    "guards[].name": KeyDoc("name (letters, digits, `_ . -`)", "What the guard is called in the output.",
                            "name: tests", "its command's first words (`pytest`)"),
    "guards[].command": KeyDoc("shell command", "Run by a shell from the root of the tree being measured.",
                               "command: ruff check .", "required"),
    "guards[].timeout": KeyDoc("seconds (> 0)", "A guard running longer fails.", "timeout: 900"),
    "generator": KeyDoc("mapping", "Who proposes the changes.", "generator: {kind: claude}",
                        "Claude Code"),
    "generator.kind": KeyDoc("`command`, `claude`, `codex`, `aider`, `anthropic`, `openai` or `tune`",
                             "The generator: an agent CLI, a model through its SDK, your own command, or "
                             "autoloop's search over marked constants.", "kind: codex"),
    "generator.command": KeyDoc("shell command", "`kind: command`: run by a shell in the work tree, the "
                                "prompt on its standard input.", "command: ./my-agent.sh",
                                "required for `kind: command` (which it implies when given alone)"),
    "generator.timeout": KeyDoc("seconds (> 0)", "The generator's time per cycle; past it, it is stopped and "
                                "the cycle is a `gen_error`.", "timeout: 1800"),
    "generator.args": KeyDoc("list, or one string split like a shell", "Extra arguments for the claude, "
                             "codex or aider CLI.", "args: --verbose", "none"),
    "generator.model": KeyDoc("model name", "The model the backend uses.", "model: claude-sonnet-4-5",
                              "the backend's own default"),
    "generator.base_url": KeyDoc("URL (`http://` or `https://`)", "`anthropic`/`openai`: the API's address, "
                                 "in place of `ANTHROPIC_BASE_URL`/`OPENAI_BASE_URL`.",
                                 "base_url: http://127.0.0.1:11434/v1", "the SDK's (or the environment's)"),
    "generator.max_turns": KeyDoc("integer >= 1", "`anthropic`/`openai`: tool turns per cycle.",
                                  "max_turns: 30"),
    "generator.max_tokens": KeyDoc("integer >= 1", "`anthropic`/`openai`: tokens per reply.",
                                   "max_tokens: 8192"),
    "generator.price": KeyDoc("mapping", "USD per million tokens, to count the cost where the backend "
                              "reports tokens but not dollars.", "price: {input: 3, output: 15}",
                              "the cost the backend reports, or none"),
    "generator.price.input": KeyDoc("number >= 0", "USD per million input tokens.", "input: 3", "required "
                                    "in `price`"),
    "generator.price.output": KeyDoc("number >= 0", "USD per million output tokens.", "output: 15",
                                     "required in `price`"),
    "generator.seed": KeyDoc("integer", "`tune`: the seed of its random choices, so a search repeats.",
                             "seed: 0", "a fixed default seed: the same search every run"),
    "stop": KeyDoc("mapping", "When the run ends: the first condition reached.", "stop: {max_cycles: 30}",
                   "the run goes on until Ctrl-C"),
    "stop.max_cycles": KeyDoc("integer >= 0", "Cycles to run, the baseline not counted (`--cycles N` "
                              "overrides it).", "max_cycles: 30", "unlimited"),
    "stop.max_minutes": KeyDoc("minutes (> 0)", "Wall-clock time of the run.", "max_minutes: 480",
                               "unlimited"),
    "stop.patience": KeyDoc("integer >= 1", "Consecutive cycles without a keep.", "patience: 10",
                            "unlimited"),
    "stop.target": KeyDoc("number", "Stop once the best metric reaches this.", "target: 0.95", "no target"),
    "stop.max_cost_usd": KeyDoc("USD (> 0)", "The generator's spending: the run stops before a cycle that "
                                "could take the total past it (the next cycle is estimated as the dearest "
                                "of the last ten).", "max_cost_usd: 15",
                                "unlimited: nothing caps the spending"),
    "accept": KeyDoc("mapping", "How a candidate is judged against the incumbent.", "accept: {rule: paired}",
                     "the strict rule"),
    "accept.rule": KeyDoc("`strict` or `paired`", "`strict`: one measurement (or the median of `repeats`) "
                          "better than the incumbent's stored one. `paired`: incumbent and candidate "
                          "measured side by side, a sequential test deciding after every pair (for noisy "
                          "metrics).", "rule: paired"),
    "accept.min_effect": KeyDoc("number >= 0 (metric units) or `N%`", "The smallest gain worth keeping.",
                                "min_effect: 2%"),
    "accept.alpha": KeyDoc("number in (0, 0.5]", "`paired`: the bound on false keeps of a change that "
                           "does nothing.", "alpha: 0.005"),
    "accept.pairs": KeyDoc("integer >= 1", "`paired`: the most pairs one decision takes (a clear win or "
                           "loss stops after a few).", "pairs: 16"),
    "accept.confirm": KeyDoc("boolean", "`paired`: a second, fresh test must keep too (false keeps <= "
                             "alpha²).", "confirm: true"),
    "accept.warmup": KeyDoc("integer >= 0", "Runs per side measured first and thrown away.", "warmup: 1"),
    "accept.final_pairs": KeyDoc("integer >= 0", "When the run stops: the best re-measured against the "
                                 "start in this many pairs (1 for a verifier the baseline showed "
                                 "deterministic; 0 skips it).", "final_pairs: 20"),
    "limits": KeyDoc("list of mappings", "Guard metrics: secondary numbers from the same verifier output, "
                     "each with a one-sided limit relative to the baseline; past it, the cycle is a "
                     "`guard_fail`.", "limits: [{metric: peak_mem_mb, max_increase: 10%}]", "no limit"),
    "limits[].metric": KeyDoc("name", "The `NAME: NUMBER` line to read.", "metric: peak_mem_mb",
                              "required unless `pattern` is given"),
    "limits[].pattern": KeyDoc("regular expression", "Instead of `metric`: its first group's last match.",
                               "pattern: 'peak ([0-9.]+) MB'", "`metric` is used"),
    "limits[].max_increase": KeyDoc("number >= 0 or `N%`", "How far above the baseline's value it may go.",
                                    "max_increase: 10%", "one of `max_increase`, `max_decrease` is required"),
    "limits[].max_decrease": KeyDoc("number >= 0 or `N%`", "How far below the baseline's value it may go.",
                                    "max_decrease: 5%", "one of `max_increase`, `max_decrease` is required"),
    "holdout": KeyDoc("mapping", "A held-out verifier, never shown to the generator, run once a candidate "
                      "has passed and at the end: a kept change it does not confirm is reported as "
                      "possible overfitting.", "holdout: {command: python /srv/heldout/eval.py, metric: "
                      "heldout_loss}", "no holdout"),
    "holdout.command": KeyDoc("shell command", "The held-out measurement (keep its files outside the "
                              "repository).", "command: python /srv/heldout/eval.py", "required"),
    "holdout.metric": KeyDoc("name", "The `NAME: NUMBER` line to read.", "metric: heldout_loss",
                             "required unless `pattern` is given"),
    "holdout.pattern": KeyDoc("regular expression", "Instead of `metric`: its first group's last match.",
                              "pattern: 'loss ([0-9.]+)'", "`metric` is used"),
    "holdout.direction": KeyDoc("`minimize` or `maximize`", "Which way is better.", "direction: minimize",
                                "the verifier's"),
    "holdout.timeout": KeyDoc("seconds (> 0)", "A holdout running longer fails.", "timeout: 600"),
    "sandbox": KeyDoc("`auto`, `bwrap`, `none`, or a mapping", "Where the generator and every measurement "
                      "run: `auto` in a bubblewrap sandbox where one can be made, else unsandboxed and "
                      "said loudly; `bwrap` a sandbox or exit 2; `none` no sandbox.", "sandbox: bwrap"),
    "sandbox.kind": KeyDoc("`auto`, `bwrap` or `none`", "As `sandbox:` alone, in the mapping form.",
                           "kind: bwrap", "`auto`"),
    "sandbox.network": KeyDoc("boolean", "The generator gets a way out through autoloop's egress proxy: "
                              "its model's API hosts and `sandbox.hosts`, nothing else.", "network: true",
                              "off, but on for the `claude`, `codex` and `aider` presets"),
    "sandbox.hosts": KeyDoc("list of hosts (`host`, `host:port`, `*.domain`, an address)",
                            "More hosts the generator may reach through the egress proxy, beside its "
                            "preset's API hosts and the base URLs set (a package registry, a docs "
                            "site); a name alone means ports 443 and 80. Loopback, link-local and "
                            "private addresses only when listed as that address.",
                            'hosts: [pypi.org, files.pythonhosted.org]', "the API hosts only"),
    "sandbox.hide": KeyDoc("list of paths (absolute or `~/…`; `*` within one level)",
                           "More paths no sandbox reads (the generator's and every measurement's), "
                           "beside the home's credential places always hidden. `[~]` hides the whole "
                           "home but what the commands need.", 'hide: ["~/code/*/.env", ~/data/raw]',
                           "only the default credential places"),
    "sandbox.unix_sockets": KeyDoc("true or false", "Let the generator make unix sockets of its own "
                                   "(headless Chromium, a multiprocessing Manager, Python 3.14's forkserver). "
                                   "Off, it can make none, so no daemon's socket is reachable, whenever it was "
                                   "bound; on, the host's sockets bound when it starts are hidden, as from a "
                                   "measurement.", "unix_sockets: true", "false: no unix socket in the generator"),
    "sandbox.writable": KeyDoc("list of paths (absolute or `~/…`)", "More paths the generator and the "
                               "measurements may write, e.g. a cache to fill.", "writable: [~/.cache/my-agent]",
                               "none: only their own trees and a private temp"),
    "resources": KeyDoc("mapping", "What one cycle may consume.", "resources: {max_disk_mb: 4096}",
                        "the defaults below"),
    "resources.max_change_mb": KeyDoc("MB (> 0)", "Files a cycle adds or changes; more is a violation.",
                                      "max_change_mb: 100"),
    "resources.max_disk_mb": KeyDoc("MB (> 0)", "The generator is stopped once it takes this much disk or "
                                    "writes a bigger file (its output logs included).", "max_disk_mb: 2048"),
    "resources.max_processes": KeyDoc("integer >= 1", "Processes the generator may run at once (not "
                                      "enforceable for root).", "max_processes: 2048"),
    "data": KeyDoc("list of mappings", "Read-only data outside git that the guards and verifier need, "
                   "linked into every verification tree.", "data: [{path: ~/datasets/x, as: data/x}]",
                   "no data"),
    "data[].path": KeyDoc("path on this machine", "The folder (outside the repository).",
                          "path: ~/datasets/tinystories", "required"),
    "data[].as": KeyDoc("repository-relative path", "Where it appears in every verification tree (not "
                        "covered by `allowed`, not tracked).", "as: data/tinystories", "required"),
    "parallel": KeyDoc("mapping", "Rounds of several candidates at once.", "parallel: {workers: 4}",
                       "one candidate at a time"),
    "parallel.workers": KeyDoc("integer 1–64", "Generators at once, each in its own worktree from the same "
                               "incumbent; the best that passes is kept, each is a cycle (`--workers N`).",
                               "workers: 4"),
    "parallel.verify": KeyDoc("integer >= 1", "Verifications at once.", "verify: 2", "as many as `workers`"),
    "parallel.executor": KeyDoc("`local` or `ray`", "Where verifications run (`ray` needs "
                                "`pip install 'autoloop-ratchet[ray]'`).", "executor: ray"),
    "parallel.address": KeyDoc("`auto` or `ray://HOST:PORT`", "`ray`: the cluster to join.",
                               "address: auto", "a private local Ray instance"),
    "parallel.num_cpus": KeyDoc("number > 0", "`ray`: CPUs one verification task asks for.", "num_cpus: 1",
                                "Ray's default, 1"),
    "parallel.num_gpus": KeyDoc("number >= 0", "`ray`: GPUs one verification task asks for.",
                                "num_gpus: 1", "none"),
    "parallel.accelerator_type": KeyDoc("text", "`ray`: only nodes of this accelerator type.",
                                        "accelerator_type: A100", "any node"),
    "parallel.resources": KeyDoc("mapping of name to number", "`ray`: custom resources a node must offer.",
                                 "resources: {bench_node: 1}", "none"),
    "parallel.max_output_mb": KeyDoc("number > 0 (MB)", "`ray` with `verifier.score`: the most of "
                                     "`$AUTOLOOP_OUTPUT` one measurement sends back from its node to the "
                                     "score on this machine (streamed to disk); more fails that "
                                     "measurement, naming this key.", "max_output_mb: 2048"),
    "parallel.env": KeyDoc("list of mappings of variables", "Worker i gets item i (modulo the list's "
                           "length) in the environment of its generator and its verifications.",
                           'env: [{CUDA_VISIBLE_DEVICES: "0"}, {CUDA_VISIBLE_DEVICES: "1"}]', "nothing added"),
    "private": KeyDoc("list of paths outside the repository", "Only `verifier.score` and `holdout` can "
                      "read them; hidden from the generator and every process running the candidate's "
                      "code.", "private: [~/datasets/labels]", "none"),
}
