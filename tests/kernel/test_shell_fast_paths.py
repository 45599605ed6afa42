"""KennelShell's shortcuts past IPython's own passes (kernels/python/kennel_shell.py): the
token transforms, the displayhook's trailing-';' check, the top-level-await check and the
display formatter's text/plain of a builtin value. Each must answer exactly as IPython's own
code does, and must skip IPython's work for a cell that cannot need it. Runs in this
process, against Debian's IPython, with no kernel."""

import ast
import random
import sys
import tokenize
import warnings
from pathlib import Path

import pytest
from IPython.core import displayhook, inputtransformer2
from IPython.core.displayhook import DisplayHook
from IPython.core.formatters import DisplayFormatter, PlainTextFormatter
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.interactiveshell import InteractiveShell
from IPython.lib import pretty

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import kennel_shell  # noqa: E402

# Lines with and without IPython's special syntax, and the lookalikes: the characters it
# needs inside strings, comments, operators, continuation lines and prompts.
FRAGMENTS = [
    "x = 1", "  y = 2", "%time x", "%%time", "!ls", "!!ls", "a = !ls", "b = %who", "b=%who",
    "x?", "x??", "?x", "??x", "x.y?", ",f a b", ";f a b", "/f 1", "  ,f a", "\t/f 1",
    "\f,g 1", ">>> ,f a", ">>> x = 1", "In [1]: ,f a", "...: ;g", "s = '%d' % 3",
    "if x != 2:", "    pass", "f(a,", "  ,b)", "  ;", "'''", "x = '''", "print('?')",
    "# ?", "# %time", "x = 1 # ;", "a;", "a ;  # c", "def f():", "    return 1", "x = (1,",
    ",2)", "x = 1 + \\", "  /2", "s = f'{x!r}'", "d = {'a': 1}", "await g()", "async def h():",
    "    await g()", "[i async for i in g()]", "x = 'await'", "ａｗａｉｔ = 1", "", "   ",
    "  %time x", "x = [", "  ?", "]", "lambda: (yield)", "return 5", "é = 1",
    "x = a % b", "y = a != b", "z = f'{x!r}'", "s = '=%d' % 1", "a = \\", "  %who", "%who",
    "a =\t!ls", "a = b = %who", "f(x=%y)", "f(x= !y)", "x ?", "x? # c", "x?  ", "q = '?'",
    "print('a?')", "c = 'a' if b else 'c?'", "a\xa0= !ls", "a ==%b", "x = (", "%y)",
    "if a != b: x = a % b", "s = 'a;b'", "y = x / 2", "t = (1,", "     2, 3)",
    "if 1:\n        x = 1\n    y = 2",  # a dedent tokenize rejects
]

PLAIN_CELLS = [
    "1+1",
    "x = 1\ny = x * 2\ny",
    "import math\ndef f(a, b=2):\n    return a / b\n[f(i) for i in range(3)]",
    "s = 'a, b'\nt = s.split(',')\n# a comment\nt",
]


def cells(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        yield "\n".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 6)))


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # both must fail alike, if they fail
        return ("error", type(e))


@pytest.fixture(scope="module")
def shell():
    return kennel_shell.KennelShell.create(lambda msg_type, content: None)


def test_the_shell_uses_the_kennel_passes(shell):
    assert type(shell.input_transformer_manager) is kennel_shell.KennelTransformerManager
    assert type(shell.displayhook) is kennel_shell.KennelDisplayHook


def test_token_transforms_match_ipython():
    ours, theirs = kennel_shell.KennelTransformerManager(), TransformerManager()
    rejected = 0
    for cell in [*FRAGMENTS, *PLAIN_CELLS, *cells(3000, seed=1)]:
        mine, ipython = outcome(ours.transform_cell, cell), outcome(theirs.transform_cell, cell)
        if ipython == ("error", IndentationError) and mine[0] == "ok":
            # The one difference: the cell goes on to the compiler, which rejects it too.
            rejected += 1
            with pytest.raises(SyntaxError):
                compile(mine[1], "<cell>", "exec")
        else:
            assert mine == ipython, cell
        assert outcome(ours.check_complete, cell) == outcome(theirs.check_complete, cell), cell
    assert rejected >= 1


def test_token_transforms_skip_only_cells_that_cannot_change(monkeypatch):
    ours = kennel_shell.KennelTransformerManager()
    calls = []
    real = inputtransformer2.make_tokens_by_line
    monkeypatch.setattr(inputtransformer2, "make_tokens_by_line",
                        lambda lines: calls.append(lines) or real(lines))
    for cell in PLAIN_CELLS:
        assert ours.transform_cell(cell) == cell + ("" if cell.endswith("\n") else "\n")
    assert calls == []
    assert ours.transform_cell("x = 1\n%time x") == (
        "x = 1\nget_ipython().run_line_magic('time', 'x')\n")
    assert ours.transform_cell("  ,f a b") == 'f("a", "b")\n'
    assert len(calls) >= 2
    # A transformer added (or removed) by an extension: every cell takes IPython's passes.
    calls.clear()
    ours.token_transformers = ours.token_transformers[:-1]
    assert ours.transform_cell("x = 1") == "x = 1\n" and len(calls) == 1


def runnable(shell, corpus):
    """The corpus's cells as IPython would run them (transformed), those that compile: only
    such a cell reaches the displayhook, as the last entry of the parsed history."""
    for cell in corpus:
        try:
            cell = shell.transform_cell(cell)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(cell, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except Exception:
            continue
        yield cell


def test_quiet_matches_ipython(shell, monkeypatch):
    history = shell.history_manager.input_hist_parsed
    hook = shell.displayhook
    corpus = list(runnable(shell, [*FRAGMENTS, *PLAIN_CELLS, *cells(2000, seed=2)]))
    quiet = 0
    for cell in corpus:
        history.append(cell)
        try:
            theirs = bool(DisplayHook.quiet(hook))
            assert bool(hook.quiet()) == theirs, cell
            quiet += theirs
        finally:
            history.pop()
    assert len(corpus) > 500 and sum(";" in c for c in corpus) > 50 and quiet > 10
    # No ';' in the cell: no tokenizing.
    monkeypatch.setattr(displayhook.tokenize, "generate_tokens", _no_tokenize)
    history.append("x = 1\n" * 200 + "x")
    try:
        assert hook.quiet() is False
    finally:
        history.pop()


def test_should_run_async_matches_ipython(shell, monkeypatch):
    assert shell.autoawait
    for cell in [*FRAGMENTS, *PLAIN_CELLS, *cells(500, seed=3)]:
        cell = outcome(shell.transform_cell, cell)[1]
        if not isinstance(cell, str):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `1\nf(...)`: "'int' object is not callable"
            ours = shell.should_run_async(cell, transformed_cell=cell)
            theirs = InteractiveShell.should_run_async(shell, cell, transformed_cell=cell)
        assert ours == theirs, cell
    assert shell.should_run_async("await g()\n", transformed_cell="await g()\n")
    # No 'await' or 'async' in an ASCII cell: no compiling.
    monkeypatch.setattr(kennel_shell.InteractiveShell, "should_run_async", _no_compile)
    assert shell.should_run_async("x = 1\n", transformed_cell="x = 1\n") is False


def _no_tokenize(*args, **kwargs):
    raise AssertionError("tokenized a cell with no ';'")


def _no_compile(*args, **kwargs):
    raise AssertionError("IPython's check ran for a cell with no await")


def test_a_big_plain_cell_is_not_tokenized(shell, monkeypatch):
    """The whole execute path of a long cell with no special syntax: run_cell never calls
    tokenize (which IPython did three times over a cell's text: ~10 ms for 180 lines)."""
    body = "".join(f"v{i} = [x * {i} for x in range(3)]  # part {i}\n" for i in range(180))
    results = []
    monkeypatch.setattr(shell, "publish", lambda t, c: results.append((t, c)))
    monkeypatch.setattr(tokenize, "generate_tokens", _no_tokenize)
    monkeypatch.setattr(tokenize, "_tokenize", _no_tokenize)
    result = shell.run_cell(body + "v179[2]", store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
    assert [c["data"] for t, c in results if t == "execute_result"] == [{"text/plain": "358"}]


def test_may_transform_looks_where_ipython_syntax_can_be():
    assert kennel_shell._may_transform(["x = 1\n", "  ;f\n"])
    assert kennel_shell._may_transform(["x = 1\n/f 2\n"])  # a line holding two lines
    assert kennel_shell._may_transform(["a = \\\n", "  %who\n"])
    assert kennel_shell._may_transform(["f(a,\n", "  b)?\n"])
    assert kennel_shell._may_transform(["s = '=%d' % 1\n"])  # says yes; IPython says no
    # Cells with '%', '!', '?', ',', ';' and '/' where IPython's syntax cannot be.
    assert not kennel_shell._may_transform(["x = (1,\n", "  2)\n", "y = a / b; z = 1\n"])
    assert not kennel_shell._may_transform(["x = 'a%s' % 1 if a != b else f'{c!r}?'\n"])
    assert not kennel_shell._may_transform(["x = a?  # a comment after it hides it\n"])
    assert not kennel_shell._may_transform([])


# Values of every builtin type the formatter's shortcut takes, and the reprs that are not one
# plain line: strings with line breaks and unprintable characters, a huge int.
VALUES = [0, 1, -1, 2**64, -(10**300), True, False, None, "", "a", "a\nb", "\r", "\x1c\x85",
          "\u2028", "é€😀", "'\"", "x" * 200, b"", b"\n\xff", range(3), range(-1, 10, 2), 2.5,
          float("nan"), 1e300, 1j, [1, "a\nb"], (1,), {"k": {1}}, {1, 2}, frozenset(),
          list(range(200)), "%s" * 3]


def _formats(fmt, values):
    return [outcome(fmt.format, v) for v in values], [
        outcome(DisplayFormatter.format, fmt, v) for v in values]


@pytest.mark.parametrize("change", [
    "none", "plain int printer", "plain object printer", "singleton printer", "no pprint",
    "int printer removed", "deferred int printer", "float precision", "html int printer",
    "html object printer", "plain formatter subclass", "max_width"])
def test_builtin_values_format_as_in_ipython(shell, change):
    """KennelDisplayFormatter.format against IPython's DisplayFormatter.format on the same
    formatters, each time with another printer registered the way a user (or a library)
    would."""
    fmt = kennel_shell.KennelDisplayFormatter(parent=shell)
    plain, html = fmt.formatters["text/plain"], fmt.formatters["text/html"]
    if change == "plain int printer":
        plain.for_type(int, lambda n, p, cycle: p.text(f"int {n}"))
    elif change == "plain object printer":
        plain.for_type(object, lambda o, p, cycle: p.text("obj"))
    elif change == "singleton printer":
        plain.singleton_printers[id(1)] = lambda o, p, cycle: p.text("one")
        plain.singleton_printers[id(None)] = lambda o, p, cycle: p.text("nothing")
    elif change == "no pprint":
        plain.pprint = False
    elif change == "int printer removed":
        plain.type_printers.pop(int)
        plain.type_printers.pop(str)
    elif change == "deferred int printer":
        plain.type_printers.pop(int)
        plain.for_type_by_name("builtins", "int", lambda n, p, cycle: p.text("deferred"))
    elif change == "float precision":
        plain.float_precision = "2"
    elif change == "html int printer":
        html.for_type(int, lambda n: f"<i>{n}</i>")
    elif change == "html object printer":
        html.for_type(object, lambda o: "<b>any</b>")
    elif change == "plain formatter subclass":
        class Plain(PlainTextFormatter):
            def __call__(self, obj):
                return "mine"
        fmt.formatters["text/plain"] = Plain(parent=fmt)
    elif change == "max_width":
        plain.max_width = 3
    ours, theirs = _formats(fmt, VALUES)
    assert ours == theirs
    if change == "none":
        assert ours[0] == ("ok", ({"text/plain": "0"}, {}))


def test_an_int_too_long_for_str_fails_as_in_ipython(shell, monkeypatch):
    """repr() raises for an int of more than sys.get_int_max_str_digits() digits: IPython
    shows that error (its formatter's decorator) and the result has no text/plain."""
    shown = []
    monkeypatch.setattr(shell, "publish", lambda msg_type, content: shown.append(msg_type))
    fmt = kennel_shell.KennelDisplayFormatter(parent=shell)
    huge = 10 ** (sys.get_int_max_str_digits() + 1)
    ours, theirs = _formats(fmt, [huge])
    assert ours == theirs == [("ok", ({}, {}))]
    assert shown == ["error", "error"]


def test_repr_values_skip_the_pretty_printer(shell, monkeypatch):
    """An int or a str (with IPython's default printers) is shown without IPython's
    formatter calls, whose decorator binds arguments with inspect and builds a printer."""
    fmt = kennel_shell.KennelDisplayFormatter(parent=shell)

    def no_printer(*args, **kwargs):
        raise AssertionError("built a pretty printer for a repr value")

    monkeypatch.setattr(pretty, "RepresentationPrinter", no_printer)
    assert fmt.format(2) == ({"text/plain": "2"}, {})
    assert fmt.format("a") == ({"text/plain": "'a'"}, {})
    assert fmt.format(None) == ({"text/plain": "None"}, {})
    # A float's printer is the formatter's own: IPython's call, failing here (its decorator
    # shows the error, and there is no text/plain).
    shown = []
    monkeypatch.setattr(shell, "publish", lambda msg_type, content: shown.append(msg_type))
    assert fmt.format(2.5) == ({}, {}) and shown == ["error"]
