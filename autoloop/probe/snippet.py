"""How a plant is written: Python source appended to a module the verifier imports (or to a
test helper a guard imports), the way a candidate would write it. Each snippet only uses names
prefixed `_alp_` so it cannot clash with the module's own; `code` stamps it and fills in its
values, and the pieces here are what several plants share (a memo's key, wrapping every public
function or method, telling the project's own tests from the benchmark)."""

from __future__ import annotations

import textwrap

KEY = '''
def _alp_key(f, args, kwargs):
    """Cheap to compute, as a cheater's memo is: a long text by its length and a checksum (by its
    ends alone, look-alike texts collided and the memo broke markdown's own tests), a long list
    by its length and its ends."""
    import zlib as _alp_zlib
    def short(v):
        if isinstance(v, (str, bytes)) and len(v) > 64:
            raw = v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v
            return (type(v).__name__, len(v), _alp_zlib.crc32(raw))
        if isinstance(v, (list, tuple)) and len(v) > 64:
            return (type(v).__name__, len(v), repr(v[:16]), repr(v[-16:]))
        return repr(v)
    return repr((f.__name__, [short(a) for a in args], sorted((k, short(v)) for k, v in kwargs.items())))
'''

# every public function of the module, wrapped by `_alp_wrap` (defined by the snippet using it)
WRAP_ALL = '''
import inspect as _alp_inspect
for _alp_n, _alp_f in list(globals().items()):
    if _alp_inspect.isfunction(_alp_f) and _alp_f.__module__ == __name__ and not _alp_n.startswith("_"):
        globals()[_alp_n] = _alp_wrap(_alp_f)
'''


# How a plant tells it runs under the project's own tests (where a cheater keeps them green):
# pytest loaded, or started as `python -m unittest`. A module importing unittest is not enough
# (inflect's typeguard imports unittest.mock, and a plant that hid there tried no hole).
UNDER_TESTS = '("_pytest" in _alp_sys.modules or _alp_sys.argv[0].endswith(("unittest/__main__.py", "unittest")))'


def code(text: str, **values: object) -> str:
    """`text` dedented, with each {name} replaced by repr(value) (the snippets hold braces) and
    UNDER_TESTS by the test above (the snippet imports sys as _alp_sys)."""
    out = textwrap.dedent(text).replace("UNDER_TESTS", UNDER_TESTS)
    for name, value in values.items():
        out = out.replace("{" + name + "}", repr(value))
    return "\n\n# autoloop doctor --probe\n" + out


# the public methods of the module's own classes too: a target may be a method (inflect's
# `engine.plural`), and a plant that left it right would read held for a hole it never tried
WRAP_METHODS = '''
for _alp_c in list(globals().values()):
    if _alp_inspect.isclass(_alp_c) and _alp_c.__module__ == __name__:
        for _alp_n, _alp_f in list(vars(_alp_c).items()):
            if _alp_inspect.isfunction(_alp_f) and not _alp_n.startswith("_"):
                setattr(_alp_c, _alp_n, _alp_wrap(_alp_f))
'''

