"""Reading the metric (contract §4) and measuring a tree with real shell commands."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

from autoloop.process import proc, running
from autoloop.program.reader import GuardSpec, Program, VerifierSpec
from autoloop.engine.metric import (_BLOCK, _PATTERN_OVERLAP, _PATTERN_WINDOW, MetricError, Measurement,
                             metric_line_regex, parse_metric, parse_metric_text)
from autoloop.engine.verify import measure


def spec(metric: str | None = "val_loss", pattern: str | None = None) -> VerifierSpec:
    return VerifierSpec(command="true", direction="minimize", metric=None if pattern else metric,
                        pattern=pattern)


# ---------------------------------------------------------------------------------------------
# The line forms: `NAME: NUMBER`, `NAME=NUMBER`, optional `METRIC `, surrounding spaces

LINE_FORMS = [
    ("val_loss: 0.5", 0.5),
    ("val_loss:0.5", 0.5),
    ("val_loss=0.5", 0.5),
    ("val_loss = 0.5", 0.5),
    ("val_loss :0.5", 0.5),
    ("val_loss  =  0.5", 0.5),
    ("METRIC val_loss: 0.5", 0.5),
    ("METRIC val_loss=0.5", 0.5),
    ("METRIC \t val_loss = 0.5", 0.5),
    ("   val_loss: 0.5", 0.5),
    ("val_loss: 0.5   ", 0.5),
    ("\tval_loss:\t0.5\t", 0.5),
    ("  METRIC val_loss: 0.5  ", 0.5),
]


@pytest.mark.parametrize("line,value", LINE_FORMS)
def test_line_forms_are_read(line: str, value: float) -> None:
    assert parse_metric_text(f"noise\n{line}\nmore noise\n", spec()) == value


# NUMBER is any float Python accepts
NUMBERS = ["0", "-0", "0.5", "-2.5", "+5", ".5", "5.", "-.5", "1e-3", "1E3", "1e+10", "-1.5E-7",
           "1_000", "1_000.000_1", "007", "123456789012345678901234567890", "2.5e-308"]


@pytest.mark.parametrize("token", NUMBERS)
def test_any_python_float_is_accepted(token: str) -> None:
    assert parse_metric_text(f"val_loss: {token}\n", spec()) == float(token)


@pytest.mark.parametrize("token", ["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity",
                                   "-Infinity", "1e999", "-1e999"])
def test_nan_and_inf_are_refused_with_a_reason(token: str) -> None:
    with pytest.raises(MetricError, match="finite"):
        parse_metric_text(f"val_loss: {token}\n", spec())


def test_nan_on_the_last_line_is_a_crash_even_after_a_good_value() -> None:
    with pytest.raises(MetricError, match="finite"):
        parse_metric_text("val_loss: 0.5\nval_loss: nan\n", spec())


@pytest.mark.parametrize("token", ["n/a", "None", "-", "0x10", "1,5", "5%", "1/2", "one", "0.5.1",
                                   "1__0", "_1", "1e", "e5", "0.5;", "''"])
def test_non_numbers_are_skipped_for_an_earlier_value(token: str) -> None:
    assert parse_metric_text(f"val_loss: 0.25\nval_loss: {token}\n", spec()) == 0.25


@pytest.mark.parametrize("token", ["n/a", "0x10", "5%"])
def test_only_non_numbers_is_an_error(token: str) -> None:
    with pytest.raises(MetricError, match="no line 'val_loss: NUMBER'"):
        parse_metric_text(f"val_loss: {token}\n", spec())


def test_last_matching_line_wins() -> None:
    text = "val_loss: 3\nval_loss=2\nother: 9\nMETRIC val_loss: 1\ntrailing\n"
    assert parse_metric_text(text, spec()) == 1.0


def test_last_line_wins_over_many() -> None:
    text = "".join(f"val_loss: {i}\n" for i in range(5000))
    assert parse_metric_text(text, spec()) == 4999.0


def test_no_trailing_newline() -> None:
    assert parse_metric_text("a\nval_loss: 0.75", spec()) == 0.75


def test_empty_output_is_an_error() -> None:
    with pytest.raises(MetricError):
        parse_metric_text("", spec())


@pytest.mark.parametrize("text", [
    "val_loss: 0.5\r\n",
    "x\r\nval_loss: 0.5\r\ny\r\n",
    "val_loss=0.5\r\n\r\n",
    "val_loss: 0.5 \r\n",
    "val_loss: 0.5\r",               # CR-terminated last line, nothing after
])
def test_crlf_lines(text: str) -> None:
    assert parse_metric_text(text, spec()) == 0.5


# Lines that must NOT be read as the metric `val_loss`
NOT_THE_METRIC = [
    "val_loss_ema: 9",            # a longer metric with a common prefix
    "val_loss2=9",
    "my_val_loss: 9",             # a longer metric with a common suffix
    "train/val_loss: 9",
    "VAL_LOSS: 9",                # names are case-sensitive
    "Val_loss: 9",
    "the val_loss: 9",            # prose mentioning it
    "val_loss: 9 (best)",         # extra text after the number
    "val_loss: 9 9",
    "val_loss 9",                 # no separator
    "val_loss:: 9",
    "METRICval_loss: 9",          # METRIC must be followed by space
    "METRIC: val_loss: 9",
    "# val_loss: 9",
    "val_loss: 9 ✓",
    "epoch 3 val_loss=9",
]


@pytest.mark.parametrize("line", NOT_THE_METRIC)
def test_other_lines_are_not_the_metric(line: str) -> None:
    assert parse_metric_text(f"val_loss: 0.5\n{line}\n", spec()) == 0.5


def test_common_prefix_metric_is_read_by_its_own_name() -> None:
    text = "val_loss: 1\nval_loss_ema: 2\n"
    assert parse_metric_text(text, spec("val_loss_ema")) == 2.0
    assert parse_metric_text(text, spec("val_loss")) == 1.0


def test_shorter_name_is_not_matched_inside_longer_one() -> None:
    with pytest.raises(MetricError):
        parse_metric_text("val_loss: 1\n", spec("loss"))


@pytest.mark.parametrize("name,line,ok", [
    ("acc@1", "acc@1: 0.7", True),
    ("a.b", "a.b: 0.7", True),
    ("a.b", "aXb: 0.7", False),        # `.` in a name is literal
    ("loss(val)", "loss(val)=0.7", True),
    ("x+", "xx: 0.7", False),
    ("bpb [val]", "bpb [val]: 0.7", True),
    ("score", "score: 0.7", True),
])
def test_metric_names_are_literal(name: str, line: str, ok: bool) -> None:
    if ok:
        assert parse_metric_text(line + "\n", spec(name)) == 0.7
    else:
        with pytest.raises(MetricError):
            parse_metric_text(line + "\n", spec(name))


def test_metric_line_regex_captures_the_token() -> None:
    rx = metric_line_regex("val_loss")
    m = rx.search(b"x\n  METRIC val_loss = 1e-3  \ny\n")
    assert m is not None and m.group(1) == b"1e-3"


def test_non_utf8_noise_does_not_break_parsing(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"\xff\xfe garbage \x80\nval_loss: 0.5\n\xc3\x28 more\n")
    assert parse_metric(out, spec()) == 0.5


def test_non_ascii_token_is_skipped() -> None:
    assert parse_metric_text("val_loss: 0.5\nval_loss: ０.７\n", spec()) == 0.5


def test_metric_on_a_line_with_nul_bytes_elsewhere(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"\0\0\0\nval_loss: 2\n\0tail\0\n")
    assert parse_metric(out, spec()) == 2.0


# ---------------------------------------------------------------------------------------------
# Huge outputs (read from the end in blocks; the file is never read whole)

NOISE_LINE = b"step 123 loss 0.1234 lr 3e-4 tokens/s 99999 ..........................\n"


def test_huge_output_metric_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    with open(out, "wb") as f:
        f.write(b"val_loss: 9\n")
        f.write(NOISE_LINE * (20_000_000 // len(NOISE_LINE)))
        f.write(b"val_loss: 0.125\n")
    assert parse_metric(out, spec()) == 0.125


def test_huge_output_metric_buried_before_megabytes_of_noise(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    with open(out, "wb") as f:
        f.write(b"val_loss: 9\nval_loss: 0.25\n")
        f.write(NOISE_LINE * (6_000_000 // len(NOISE_LINE)))
    assert parse_metric(out, spec()) == 0.25


def test_huge_output_without_metric_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(NOISE_LINE * (3_000_000 // len(NOISE_LINE)))
    with pytest.raises(MetricError):
        parse_metric(out, spec())


def test_giant_line_without_newline_after_the_metric(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"val_loss: 0.5\n" + b"x" * 5_000_000)
    assert parse_metric(out, spec()) == 0.5


def test_giant_line_before_the_metric(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"x" * 5_000_000 + b"\nval_loss: 0.5")
    assert parse_metric(out, spec()) == 0.5


def test_giant_single_line_without_any_newline_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"y" * 5_000_000)
    with pytest.raises(MetricError):
        parse_metric(out, spec())


def test_giant_lines_on_both_sides_of_the_metric(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"z" * 3_000_000 + b"\nval_loss: 0.5\n" + b"x" * 3_000_000)
    assert parse_metric(out, spec()) == 0.5


def peak_memory_of(fn) -> int:
    import tracemalloc
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_giant_line_without_newline_uses_bounded_memory(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"val_loss: 0.5\n" + b"x" * 8_000_000)
    assert peak_memory_of(lambda: parse_metric(out, spec())) < 4_000_000


def test_many_lines_use_bounded_memory(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"val_loss: 0.5\n" + b"y\n" * 4_000_000)
    assert peak_memory_of(lambda: parse_metric(out, spec())) < 4_000_000


def test_giant_line_ending_in_newline_uses_bounded_memory(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    out.write_bytes(b"val_loss: 0.5\n" + b"x" * 8_000_000 + b"\n")
    assert peak_memory_of(lambda: parse_metric(out, spec())) < 4_000_000


@pytest.mark.parametrize("inside", [0, 1, 5, 10, 15, 16, 17])
@pytest.mark.parametrize("blocks_after", [0, 2])
def test_metric_line_straddling_a_block_boundary(tmp_path: Path, inside: int, blocks_after: int) -> None:
    """The block boundary falls `inside` bytes into the metric line (16 bytes with its newline)."""
    line = b"val_loss: 0.125\n"
    assert len(line) == 16
    tail = b"\n" * (_BLOCK * (blocks_after + 1) - (len(line) - inside))
    out = tmp_path / "v.out"
    out.write_bytes(b"val_loss: 7\n" + b"h" * 100_000 + b"\n" + line + tail)
    assert parse_metric(out, spec()) == 0.125


@pytest.mark.parametrize("size", [_BLOCK - 1, _BLOCK, _BLOCK + 1, 2 * _BLOCK])
def test_file_exactly_around_one_block(tmp_path: Path, size: int) -> None:
    line = b"val_loss: 3\n"
    out = tmp_path / "v.out"
    out.write_bytes(line + b"a" * (size - len(line) - 1) + b"\n")
    assert out.stat().st_size == size
    assert parse_metric(out, spec()) == 3.0


def test_chunked_read_matches_a_whole_read_on_mixed_output(tmp_path: Path) -> None:
    """Many metric lines of varying lengths across many blocks: the last one wins."""
    parts = []
    for i in range(40_000):
        parts.append(b"val_loss: %d\n" % i if i % 7 == 0 else b"noise %s\n" % (b"#" * (i % 97)))
    out = tmp_path / "v.out"
    out.write_bytes(b"".join(parts))
    expected = max(i for i in range(40_000) if i % 7 == 0)
    assert parse_metric(out, spec()) == float(expected)


# ---------------------------------------------------------------------------------------------
# verifier.pattern: the first group of the last match

@pytest.mark.parametrize("pattern,text,value", [
    (r"acc=([0-9.]+)", "acc=0.1\nacc=0.2\nacc=0.3 done\n", 0.3),
    (r"^score (\S+)$", "score 1\nscore 2\nx score 3\n", 2.0),
    (r"(\d+\.\d+)% top-1", "71.5% top-1, 80.0% top-5\n", 71.5),
    (r"val bpb ([-+0-9.e]+)", "val bpb 1e-3\n", 0.001),
    (r"v=(\d+)", "v=1\nv=22\n", 22.0),
    (r"(?:acc|score)=(\S+)", "acc=1\nscore=2\n", 2.0),
])
def test_pattern_first_group_of_last_match(pattern: str, text: str, value: float) -> None:
    assert parse_metric_text(text, spec(pattern=pattern)) == value


def test_pattern_without_a_match_is_an_error() -> None:
    with pytest.raises(MetricError, match="did not match"):
        parse_metric_text("nothing here\n", spec(pattern=r"acc=(\d+)"))


def test_pattern_matching_a_non_number_is_an_error() -> None:
    with pytest.raises(MetricError, match="not a number"):
        parse_metric_text("acc=high\n", spec(pattern=r"acc=(\w+)"))


def test_pattern_last_match_is_not_a_number_even_if_earlier_is() -> None:
    # the pattern's LAST match decides; a non-number there is a crash, not a fallback
    with pytest.raises(MetricError):
        parse_metric_text("acc=1\nacc=x\n", spec(pattern=r"acc=(\w+)"))


@pytest.mark.parametrize("token", ["nan", "inf", "-inf"])
def test_pattern_nan_inf_refused(token: str) -> None:
    with pytest.raises(MetricError, match="finite"):
        parse_metric_text(f"acc={token}\n", spec(pattern=r"acc=(\S+)"))


def test_pattern_with_a_non_participating_group_is_a_metric_error() -> None:
    with pytest.raises(MetricError, match="group"):
        parse_metric_text("score 5\ndone\n", spec(pattern=r"score (\d+)|done"))


def test_pattern_metric_at_the_end_of_huge_output(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    with open(out, "wb") as f:
        f.write(NOISE_LINE * (20_000_000 // len(NOISE_LINE)))
        f.write(b"FINAL acc=0.875\n")
    assert parse_metric(out, spec(pattern=r"FINAL acc=(\S+)")) == 0.875


def test_pattern_metric_buried_before_more_than_one_scan_block(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    with open(out, "wb") as f:
        f.write(b"FINAL acc=0.5\n")
        f.write((b"." * 1023 + b"\n") * ((_PATTERN_WINDOW // 1024) + 64))
    assert parse_metric(out, spec(pattern=r"FINAL acc=(\S+)")) == 0.5


@pytest.mark.parametrize("shift", [-9, -5, -1, 0, 1, 4, 8, 12])
def test_pattern_match_straddling_a_scan_block(tmp_path: Path, shift: int) -> None:
    """The match `FINAL acc=0.8125` begins `shift` bytes before the end of the first block."""
    line = b"FINAL acc=0.8125\n"
    head = b"x" * (_PATTERN_WINDOW - shift - 1) + b"\n"
    out = tmp_path / "v.out"
    out.write_bytes(b"FINAL acc=0.5\n" + head[14:] + line + b"tail\n")
    assert parse_metric(out, spec(pattern=r"FINAL acc=(\S+)")) == 0.8125


@pytest.mark.parametrize("shift", [1, 2])
def test_pattern_with_multibyte_text_straddling_a_scan_block(tmp_path: Path, shift: int) -> None:
    """A pattern with non-ASCII text must match even when that character is cut by a block edge."""
    line = "val bpb → 0.75\n".encode()
    arrow = line.index("→".encode())
    # the 3-byte arrow starts `shift` bytes before the block boundary
    pad = _PATTERN_WINDOW - arrow - shift
    out = tmp_path / "v.out"
    out.write_bytes(b"y" * (pad - 1) + b"\n" + line)
    assert parse_metric(out, spec(pattern=r"val bpb → (\S+)")) == 0.75


def test_pattern_last_match_wins_across_blocks(tmp_path: Path) -> None:
    out = tmp_path / "v.out"
    with open(out, "wb") as f:
        for i in range(3):
            f.write(b"acc=%d\n" % i)
            f.write(b"." * (_PATTERN_WINDOW // 2) + b"\n")
    assert parse_metric(out, spec(pattern=r"acc=(\d+)")) == 2.0


@pytest.mark.parametrize("blocks", [0, 1])
@pytest.mark.parametrize("cut", [2, 3, 4])
def test_pattern_overlap_start_inside_the_last_match(tmp_path: Path, cut: int, blocks: int) -> None:
    """Nothing matches after `0.8125 bpb`; the overlap re-scanned with the next block (or at
    the end of the output) starts `cut` bytes into that line."""
    line = b"0.8125 bpb\n"
    tail = b"\n" * (_PATTERN_OVERLAP - len(line) + cut)
    head = b"x" * (blocks * _PATTERN_WINDOW) + b"\n"
    out = tmp_path / "v.out"
    out.write_bytes(head + b"0.5 bpb\n" + line + tail)
    assert parse_metric(out, spec(pattern=r"([\d.]+) bpb")) == 0.8125


@pytest.mark.parametrize("before_edge", [100, 30_000, _PATTERN_OVERLAP - 20])
def test_pattern_last_match_inside_the_overlap_with_nothing_after(tmp_path: Path, before_edge: int) -> None:
    """The last match lies wholly in the part of block 1 that is re-read with block 2."""
    line = b"acc=0.625\n"
    head = b"acc=0.5\n" + b"x" * (_PATTERN_WINDOW - before_edge - len(line) - 9) + b"\n"
    out = tmp_path / "v.out"
    out.write_bytes(head + line + b"y" * (before_edge - 1) + b"\n" + b"z\n" * 1000)
    assert parse_metric(out, spec(pattern=r"acc=(\S+)")) == 0.625


@pytest.mark.parametrize("size", [_PATTERN_WINDOW - 1, _PATTERN_WINDOW, _PATTERN_WINDOW + 1])
def test_pattern_on_an_output_of_exactly_one_block(tmp_path: Path, size: int) -> None:
    line = b"acc=0.75\n"
    out = tmp_path / "v.out"
    out.write_bytes(b"." * (size - len(line) - 1) + b"\n" + line)
    assert out.stat().st_size == size
    assert parse_metric(out, spec(pattern=r"acc=(\S+)")) == 0.75


def test_pattern_match_in_the_overlap_is_not_doubled_into_a_wrong_value(tmp_path: Path) -> None:
    """A longer number cut by the block edge must be read whole, not as its prefix."""
    line = b"acc=123456789\n"
    out = tmp_path / "v.out"
    out.write_bytes(b"z" * (_PATTERN_WINDOW - 8 - 1) + b"\n" + line)
    assert parse_metric(out, spec(pattern=r"acc=(\d+)")) == 123456789.0


# ---------------------------------------------------------------------------------------------
# measure(): guards, then the verifier, with real shell commands

def program(tmp_path: Path, verifier: str, guards: list[tuple[str, str]] = (), *,
            timeout: float = 30, guard_timeout: float = 30, pattern: str | None = None) -> Program:
    return Program(
        path=tmp_path / "program.md", repo_root=tmp_path, goal="g", allowed=("a.py",),
        verifier=VerifierSpec(command=verifier, direction="minimize",
                              metric=None if pattern else "val_loss", pattern=pattern, timeout=timeout),
        guards=tuple(GuardSpec(n, c, guard_timeout) for n, c in guards),
    )


def run_measure(tmp_path: Path, prog: Program, **kw) -> Measurement:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(kw.pop("env", {}))
    return measure(prog, cwd=work, env=env, log_dir=tmp_path / "logs", marker=proc.new_marker(), **kw)


def test_measure_reads_the_metric(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1.5'; echo 'val_loss: 0.5'"))
    assert (m.metric, m.error, m.guards) == (0.5, None, ())


def test_measure_keeps_the_verifier_log(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 0.5'; echo oops >&2"))
    assert m.log_stem is not None
    assert m.log_stem.with_name(m.log_stem.name + ".out").read_text() == "val_loss: 0.5\n"
    assert m.log_stem.with_name(m.log_stem.name + ".err").read_text() == "oops\n"


def test_measure_with_pattern(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'acc 97.5%'", pattern=r"acc ([\d.]+)%"))
    assert m.metric == 97.5


def test_measure_runs_in_cwd_with_env(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, 'test "$(basename "$PWD")" = work && echo "val_loss: $X"'),
                    env={"X": "4.25"})
    assert m.metric == 4.25


def test_measure_gives_the_verifier_the_marker(tmp_path: Path) -> None:
    prog = program(tmp_path, f'test -n "${running.MARKER_VAR}" && echo "val_loss: 1"')
    assert run_measure(tmp_path, prog).metric == 1.0


def test_failing_guard_means_verifier_not_run(tmp_path: Path) -> None:
    flag = tmp_path / "verifier-ran"
    m = run_measure(tmp_path, program(tmp_path, f"touch {flag}; echo 'val_loss: 1'",
                                      [("tests", "echo bad >&2; exit 1")]))
    assert not flag.exists()
    assert m.metric is None


def test_failing_guard_is_reported(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'",
                                      [("ok", "true"), ("tests", "echo first >&2; echo 'E: last' >&2; exit 4")]))
    assert not m.guards_ok
    assert m.failed_guard is not None and m.failed_guard.name == "tests"
    assert m.failed_guard.detail == "exit 4: E: last"
    assert [g.ok for g in m.guards] == [True, False]
    assert m.error is None  # a guard failure is not a verifier crash


def test_failing_guard_detail_has_no_terminal_escapes(tmp_path: Path) -> None:
    # pytest under `addopts = --color=yes` ends in a coloured line; the detail goes into the
    # lesson (experiments.md, results.tsv, the progress line), where escapes are garbage
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'", [(
        "tests", r"printf '\033[31m\033[1m36 failed\033[0m, \033[32m573 passed\033[0m\n\033[0m\n'; exit 1")]))
    assert m.failed_guard is not None and m.failed_guard.detail == "exit 1: 36 failed, 573 passed"


def test_missing_module_that_the_checkout_has_names_the_file_to_commit(tmp_path: Path) -> None:
    # humanize's src/humanize/_version.py is written by `pip install -e .` and ignored by git:
    # the measured tree (committed files only) has no such module
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "_version.py").write_text("v = 1\n")
    err = "echo \"ModuleNotFoundError: No module named 'pkg._version'\" >&2; exit 1"
    m = run_measure(tmp_path, program(tmp_path, err))
    assert m.error is not None and m.error.endswith(
        "(src/pkg/_version.py is in your checkout, but measurements see only the committed files: "
        "commit it (`git add -f src/pkg/_version.py` if git ignores it), or have the command generate it)"), m.error
    other = run_measure(tmp_path, program(tmp_path, err.replace("pkg._version", "pkg.other")))
    assert other.error == "exit 1: ModuleNotFoundError: No module named 'pkg.other'"


def test_missing_module_that_is_committed_says_how_to_make_it_importable(tmp_path: Path) -> None:
    # tabulate 0.9.0 with `python bench/run.py` (bench/ on sys.path, not the root) and the
    # project not installed: the module is committed, so "commit it" was the wrong advice
    import subprocess
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("v = 1\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pkg"]):
        subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True)
    err = "echo \"ModuleNotFoundError: No module named 'pkg'\" >&2; exit 1"
    m = run_measure(tmp_path, program(tmp_path, err))
    assert m.error == (
        "exit 1: ModuleNotFoundError: No module named 'pkg' (pkg/__init__.py is committed, but the "
        "command's Python does not look for modules at the repository root: install the project into "
        "the Python the verifier uses (`pip install -e .`), or run it with the root on its path "
        "(`PYTHONPATH=. python …`))"), m.error


def test_shell_not_finding_a_path_the_checkout_has_names_it(tmp_path: Path) -> None:
    # unsandboxed, an ignored .venv/ at the top of the checkout is not in the measured tree
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'", [("tests", ".venv/bin/python -m pytest")]))
    assert m.failed_guard is not None
    assert m.failed_guard.detail.endswith(
        "not found (.venv/bin/python is in your checkout, but measurements run in a tree of the committed "
        f"files, which does not have it: commit it, or name it by its absolute path {tmp_path}/.venv/bin/python)"), \
        m.failed_guard.detail
    other = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'", [("tests", "nope/bin/python -m pytest")]))
    assert other.failed_guard is not None and other.failed_guard.detail.endswith("nope/bin/python: not found")


def test_guards_stop_at_first_failure(tmp_path: Path) -> None:
    flag = tmp_path / "second-guard-ran"
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'",
                                      [("one", "exit 1"), ("two", f"touch {flag}")]))
    assert not flag.exists()
    assert [g.name for g in m.guards] == ["one"]


def test_passing_guards_then_verifier(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 2'", [("a", "true"), ("b", "exit 0")]))
    assert m.guards_ok and m.failed_guard is None
    assert [g.detail for g in m.guards] == ["exit 0", "exit 0"]
    assert m.metric == 2.0


def test_guard_log_is_written(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 2'", [("lint check", "echo linted")]))
    stem = m.guards[0].log_stem
    assert stem.with_name(stem.name + ".out").read_text() == "linted\n"


def test_with_guards_false_skips_guards(tmp_path: Path) -> None:
    flag = tmp_path / "guard-ran"
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 2'", [("g", f"touch {flag}; exit 1")]),
                    with_guards=False)
    assert not flag.exists()
    assert (m.metric, m.guards) == (2.0, ())


def test_guard_timeout_is_a_failure(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'", [("slow", "exec sleep 5")],
                                      guard_timeout=0.3))
    assert not m.guards_ok
    assert m.guards[0].detail.startswith("timed out")


def test_verifier_nonzero_exit_gives_last_stderr_line(tmp_path: Path) -> None:
    cmd = "echo 'val_loss: 0.5'; printf 'Traceback\\n  File x\\nValueError: bad shape\\n\\n' >&2; exit 3"
    m = run_measure(tmp_path, program(tmp_path, cmd))
    assert m.metric is None
    assert m.error == "exit 3: ValueError: bad shape"


def test_verifier_nonzero_exit_without_stderr_uses_stdout(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'loading'; echo 'failed to load'; exit 2"))
    assert m.error == "exit 2: failed to load"


def test_verifier_nonzero_exit_without_output(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "exit 7"))
    assert m.error == "exit 7"


def test_verifier_error_line_is_clipped(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "printf 'E%.0s' $(seq 1 500) >&2; exit 1"))
    assert m.error is not None
    assert m.error.startswith("exit 1: EEEE") and len(m.error) <= len("exit 1: ") + 200


def test_verifier_timeout_is_a_crash(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'; exec sleep 5", timeout=0.3))
    assert m.metric is None
    assert m.error is not None and m.error.startswith("timed out")


def test_verifier_killed_by_signal_is_a_crash(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'; kill -9 $$"))
    assert m.metric is None and m.error is not None


def test_verifier_without_metric_is_a_crash(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'accuracy: 1'"))
    assert m.metric is None
    assert m.error == "no line 'val_loss: NUMBER' in the verifier's output"


def test_metric_on_stderr_is_not_read(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1' >&2"))
    assert m.metric is None and m.error is not None


def test_verifier_nan_is_a_crash(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: nan'"))
    assert m.metric is None and m.error is not None and "finite" in m.error


def test_verifier_with_closed_stdin_does_not_hang(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "cat; echo 'val_loss: 1'", timeout=5))
    assert m.metric == 1.0


def test_measure_duration_adds_up(tmp_path: Path) -> None:
    m = run_measure(tmp_path, program(tmp_path, "echo 'val_loss: 1'", [("g", "true"), ("h", "sleep 0.2")]))
    assert m.duration_s >= sum(g.duration_s for g in m.guards) >= m.guards[1].duration_s >= 0.2
    # `verify` and `doctor` print the verifier's own time: not the guards' before it (a 5 s test
    # suite guard made a 1 s benchmark read "6.3s")
    assert m.verifier_s == pytest.approx(m.duration_s - m.guards[0].duration_s - m.guards[1].duration_s)
    assert m.verifier_s < m.duration_s


def test_measure_real_python_verifier(tmp_path: Path) -> None:
    script = tmp_path / "work" / "ev.py"
    script.parent.mkdir()
    script.write_text("import sys\nfor i in range(3):\n    print(f'val_loss: {1/(i+1)}')\n"
                      "print('METRIC val_loss=0.125')\n")
    m = run_measure(tmp_path, program(tmp_path, f"{sys.executable} ev.py"))
    assert m.metric == 0.125 and math.isfinite(m.metric)


def test_measure_a_given_verifier_with_its_own_timeout(tmp_path: Path) -> None:
    """The holdout is measured as it is in program.md: its command, metric and timeout."""
    from autoloop.program.reader import HoldoutSpec

    prog = program(tmp_path, "echo 'val_loss: 1'", [("g", "true")])
    hold = HoldoutSpec(command="echo 'held: 7'", direction="minimize", metric="held")
    assert run_measure(tmp_path, prog, verifier=hold, with_guards=False).metric == 7
    slow = HoldoutSpec(command="sleep 5", direction="minimize", metric="held", timeout=0.3)
    m = run_measure(tmp_path, prog, verifier=slow)
    assert m.metric is None and m.error == "timed out after 0.3s" and [g.name for g in m.guards] == ["g"]


def test_steps_carry_each_timeout() -> None:
    from autoloop.engine.verify import steps

    prog = Program(path=Path("program.md"), repo_root=Path("."), goal="g", allowed=("a.py",),
                   verifier=VerifierSpec(command="v", direction="minimize", metric="m", timeout=9),
                   guards=(GuardSpec("lint", "l", 3),))
    assert steps(prog) == [proc.Step("lint", "l", 3, True), proc.Step("verifier", "v", 9, False)]
    assert steps(prog, with_guards=False) == [proc.Step("verifier", "v", 9, False)]


def test_the_harness_share_leaves_out_the_targets_calls_and_their_imports() -> None:
    """A replay benchmark's score says how long the targets' calls and their modules' import
    took; the rest of the wall time is the harness. Without those lines there is no share."""
    from types import SimpleNamespace

    from autoloop.commands.verify import harness_share

    said = "target_seconds: 1.000000\nimport_seconds: 2.000000\nchecked 10 outcomes\n"
    inside, imported, rest = harness_share(SimpleNamespace(score_said=said, metric=3.3))  # type: ignore[arg-type]
    assert (inside, imported) == (1.0, 2.0) and abs(rest - 0.3 / 3.3) < 1e-9
    old = harness_share(SimpleNamespace(score_said="target_seconds: 2.5\n", metric=5.0))  # type: ignore[arg-type]
    assert old == (2.5, 0.0, 0.5)
    assert harness_share(SimpleNamespace(score_said="checked 10 outcomes\n", metric=5.0)) is None  # type: ignore[arg-type]
