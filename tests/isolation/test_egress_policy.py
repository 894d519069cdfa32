"""The egress proxy's decision, every refusal path, with a fake resolver: no packet is sent (a
refusal of a link-local, private or public address is shown here, never by trying it)."""

from __future__ import annotations

import pytest

from autoloop.base.hosts import BadHost, parse_entry, url_rule
from autoloop.isolation.egress.allowlist import preset_rules, url_rules
from autoloop.isolation.egress.policy import Policy, policy

PUBLIC = "93.184.215.14"


class Resolver:
    """Names → addresses, and which names were looked up (a refusal before resolving asks none)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table, self.asked = table, []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError("Name or service not known")
        return self.table[host]


def _policy(*entries: str) -> Policy:
    return policy(parse_entry(e) for e in entries)


def test_a_listed_name_is_allowed_at_its_public_addresses_only():
    dns = Resolver({"pypi.org": [PUBLIC, "2a04:4e42::223"]})
    d = _policy("pypi.org").decide("PyPI.org.", 443, dns)
    assert d.allowed and d.addresses == (PUBLIC, "2a04:4e42::223") and d.target == "pypi.org:443"


def test_a_host_not_listed_is_refused_without_resolving_it():
    dns = Resolver({"evil.example": [PUBLIC]})
    d = _policy("pypi.org").decide("evil.example", 443, dns)
    assert not d.allowed and "not in the allowlist" in d.reason and dns.asked == []


def test_a_listed_name_on_another_port_is_refused():
    d = _policy("pypi.org").decide("pypi.org", 22, Resolver({"pypi.org": [PUBLIC]}))
    assert not d.allowed and "not in the allowlist" in d.reason
    assert _policy("pypi.org:8443").decide("pypi.org", 443, Resolver({})).allowed is False


@pytest.mark.parametrize("address, kind", [
    ("169.254.169.254", "link-local"),           # cloud metadata
    ("fe80::1", "link-local"),
    ("127.0.0.1", "loopback"), ("127.0.0.2", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private"), ("172.16.0.9", "private"), ("192.168.1.1", "private"), ("fd00::5", "private"),
    ("100.64.0.1", "private"),                   # carrier-grade NAT
    ("::ffff:127.0.0.1", "loopback"),            # an IPv4-mapped loopback is loopback
    ("0.0.0.0", "not routable"),
])
def test_a_name_resolving_to_a_special_address_is_refused(address, kind):
    # DNS rebinding: a listed name that answers with the host's loopback or the metadata server
    d = _policy("api.example.com").decide("api.example.com", 443, Resolver({"api.example.com": [address]}))
    assert not d.allowed and kind in d.reason and d.addresses == ()


def test_only_the_public_addresses_of_a_mixed_answer_are_used():
    d = _policy("api.example.com").decide("api.example.com", 443,
                                          Resolver({"api.example.com": ["169.254.169.254", PUBLIC]}))
    assert d.allowed and d.addresses == (PUBLIC,)


@pytest.mark.parametrize("address", ["169.254.169.254", "127.0.0.1", "10.0.0.1", "::1", "fe80::1"])
def test_an_address_not_listed_is_refused(address):
    d = _policy("pypi.org", "*.example.com").decide(address, 443, Resolver({}))
    assert not d.allowed and "not in the allowlist" in d.reason


def test_an_address_listed_exactly_is_allowed_at_its_port_only():
    pol = _policy("127.0.0.1:8080")
    assert pol.decide("127.0.0.1", 8080, Resolver({})).addresses == ("127.0.0.1",)
    assert not pol.decide("127.0.0.1", 8081, Resolver({})).allowed       # another service on loopback
    assert not pol.decide("127.0.0.2", 8080, Resolver({})).allowed       # another loopback address


def test_a_private_name_is_reached_when_its_address_is_listed_too():
    dns = Resolver({"registry.corp": ["10.0.0.7"]})
    assert not _policy("registry.corp").decide("registry.corp", 443, dns).allowed
    assert _policy("registry.corp", "10.0.0.7").decide("registry.corp", 443, dns).addresses == ("10.0.0.7",)


def test_wildcards_name_what_is_below_a_domain_and_never_an_address():
    dns = Resolver({"files.pythonhosted.org": [PUBLIC], "pythonhosted.org": [PUBLIC]})
    pol = _policy("*.pythonhosted.org")
    assert pol.decide("files.pythonhosted.org", 443, dns).allowed
    assert not pol.decide("pythonhosted.org", 443, dns).allowed
    assert not pol.decide("evilpythonhosted.org", 443, dns).allowed
    assert not _policy("*.0.1").decide("127.0.0.1", 443, dns).allowed


def test_a_name_that_does_not_resolve_is_refused():
    d = _policy("pypi.org").decide("pypi.org", 443, Resolver({}))
    assert not d.allowed and "does not resolve" in d.reason


def test_entries_are_parsed_or_refused_with_the_reason():
    assert str(parse_entry("PyPI.org")) == "pypi.org:443,80"
    assert str(parse_entry("[::1]:9000")) == "[::1]:9000"
    assert str(parse_entry("*.hf.co:443")) == "*.hf.co:443"
    for bad, why in [("a b", "not a host"), ("x:0", "port"), ("*.com", "wildcard"), ("http://x/y", "not a host"),
                     ("*.1.2.3.4", "wildcard"), ("[::1", "closing")]:
        with pytest.raises(BadHost, match=why):
            parse_entry(bad)


def test_base_urls_and_presets_make_rules():
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4010/v1", "OPENAI_BASE_URL": "https://llm.corp:8443",
           "OTHER": "https://ignored.example"}
    rules = url_rules(env, "https://gw.example/api")
    assert [str(r) for r in rules] == ["gw.example:443", "127.0.0.1:4010", "llm.corp:8443"]
    assert url_rule("not a url", "x") is None
    assert [str(r) for r in preset_rules("claude")] == ["api.anthropic.com:443", "platform.claude.com:443"]
    assert preset_rules("command") == []
    # a loopback API host is reached at its exact port, as the real-CLI tests' server is
    pol = policy(rules)
    assert pol.decide("127.0.0.1", 4010, Resolver({})).allowed
    assert not pol.decide("127.0.0.1", 4011, Resolver({})).allowed
