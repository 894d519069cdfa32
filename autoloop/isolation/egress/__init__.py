"""Egress for sandboxes with the network on: the sandbox keeps its own empty network namespace;
the only thing in it is a socket listening on 127.0.0.1:3128 that belongs to autoloop's proxy
(`launch` puts it there; `proxy` serves it from the host's namespace; `policy` decides each
host:port before a packet leaves; `allowlist` says which hosts a run allows).

Imports only the standard library and `autoloop.isolation.egress` itself (`launch` runs as a
script, before autoloop is importable).
"""
