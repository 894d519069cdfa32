"""Text from outside (a verifier's crash, Ray's error messages) reaches the decide step, and from
there the lesson, the ledger, results.tsv and the next prompt, without terminal escape codes or
other control characters; a refusal by Ray is one line, and a token refusal says what to set."""

from __future__ import annotations

from pathlib import Path

from autoloop.engine.measure import sample
from autoloop.engine.metric import Measurement
from autoloop.engine.rayout import reason

RAY_SAID = ("ray: RayTaskError(OwnerDiedError): \x1b[36mray::run_steps()\x1b[39m (pid=4242, ip=10.0.0.2)\n"
            "  File \"x.py\", line 1\x07\x08\r\x1b]0;title\x07 owner died")


def _clean(text: str) -> bool:
    return not any(ord(ch) < 0x20 and ch not in "\n\t" or 0x7f <= ord(ch) <= 0x9f for ch in text)


def test_a_crash_message_reaches_the_decide_step_clean():
    s = sample(Measurement(None, (), RAY_SAID, None, 0.0), "B", "B1")
    assert s.error is not None and _clean(s.error), repr(s.error)
    assert "ray::run_steps() (pid=4242" in s.error and "owner died" in s.error


def test_a_ray_refusal_is_one_clean_line():
    said = reason(ConnectionError("Failed to connect\n\x1b[31mto Ray\x1b[0m cluster\r"))
    assert said == "ConnectionError: Failed to connect to Ray cluster", said


def test_a_token_refusal_says_what_to_set(tmp_path: Path):
    log = tmp_path / "ray.log"
    log.write_text("[2026-01-01 W 1 1] gcs_client.cc:210: Failed to get cluster ID from GCS server: "
                   "Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing\n")
    said = reason(ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379"), log)
    assert said.startswith("ConnectionError: Failed to connect to Ray cluster at 10.0.0.5:6379; ")
    assert "RAY_AUTH_MODE=token" in said and "RAY_AUTH_TOKEN" in said and "\n" not in said
    # without a sign of token auth, no advice about it
    assert "RAY_AUTH" not in reason(ConnectionError("Failed to connect"), tmp_path / "absent.log")
