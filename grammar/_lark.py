"""What every Lark-based reader shares: loading a grammar once, and turning Lark's
exceptions into located ParseErrors with words a user understands."""

from __future__ import annotations

import gc
from functools import lru_cache
from importlib import resources

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at


@lru_cache(maxsize=None)
def grammar_text(name: str) -> str:
    return resources.files("layerc.grammar").joinpath(name).read_text(encoding="utf-8")


def build_parser(name: str, start: list[str], transformer=None) -> lark.Lark:
    """An LALR parser with the contextual lexer; ``transformer`` builds the IR during the parse.

    With lark-cython installed the same grammar runs on its Cython lexer and parser;
    callbacks read tokens through ``.value`` so both kinds of token work.
    """
    return lark.Lark(
        grammar_text(name),
        parser="lalr",
        lexer="contextual",
        start=start,
        transformer=transformer,
        propagate_positions=False,
        maybe_placeholders=False,
        cache=False,
        **_plugins(),
    )


def _plugins() -> dict:
    try:
        import lark_cython
    except ImportError:
        return {}
    return {"_plugins": lark_cython.plugins}


def run_parser(parser: lark.Lark, text: str, start: str, path: str | None, describe: dict[str, str], refine=None):
    """Parse ``text``; every failure becomes a ParseError at the offending line and column.

    ``refine(line_text, column)`` may return a better ``(column, message)`` for an error that
    falls at the start of a composite terminal.
    """
    # The parse allocates a graph that lives on; cycle-collector passes over it while it grows
    # are pure cost (they doubled the time on 256-expert dumps), so collection waits until after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parser.parse(text, start=start)
    except UnexpectedInput as e:
        err = _located(e, text, path, describe)
        if refine is not None and err.loc is not None and err.source_line is not None:
            better = refine(err.source_line, err.loc.column)
            if better is not None:
                err = ParseError(better[1], path, Location(err.loc.line, better[0]), err.source_line)
        raise err from None
    except VisitError as e:  # an IR-building callback raised
        inner = e.orig_exc
        if isinstance(inner, LayercError):
            raise inner.with_source(path, text) from None
        raise ParseError(f"{type(inner).__name__}: {inner}", path).with_source(path, text) from None
    except LayercError as e:
        raise e.with_source(path, text) from None
    finally:
        if collecting:
            gc.enable()


def _located(e: UnexpectedInput, text: str, path: str | None, describe: dict[str, str]) -> ParseError:
    if isinstance(e, UnexpectedEOF):
        line = text.count("\n") + 1
        col = len(text) - text.rfind("\n")
        msg = "unexpected end of input" + _expected(e.expected, describe)
    elif isinstance(e, UnexpectedCharacters):
        line, col = e.line, e.column
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        shown = "a newline" if ch == "\n" else f"'{ch}'"
        msg = f"unexpected {shown}" + _expected(e.allowed, describe)
    elif isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            line = text.count("\n") + 1
            col = len(text) - text.rfind("\n")
            msg = "unexpected end of input"
        else:
            line, col = tok.line, tok.column
            value = str(tok)
            shown = "a newline" if value == "\n" else f"'{value[:60]}'"
            msg = f"unexpected {shown}"
        msg += _expected(e.expected, describe)
    else:  # pragma: no cover - Lark has no other subclasses today
        line, col, msg = getattr(e, "line", 1), getattr(e, "column", 1), str(e)
    line = max(int(line or 1), 1)
    col = max(int(col or 1), 1)
    return ParseError(msg, path, Location(line, col), source_line_at(text, line))


def _expected(names, describe: dict[str, str]) -> str:
    wanted = sorted({describe.get(n, _anonymous(n)) for n in names or () if not n.startswith("$")})
    wanted = [w for w in wanted if w]
    if not wanted:
        return ""
    if len(wanted) > 6:
        wanted = wanted[:6] + ["..."]
    return "; expected " + (wanted[0] if len(wanted) == 1 else "one of " + ", ".join(wanted))


#: Terminals both readers name the same way (the constant sub-grammar), for error messages.
COMMON_TERMINALS = {
    "REF": "a value '%name'",
    "ATOM": "a constant",
    "STRING": "a quoted string",
    "CALL_OPEN": "a constant such as 'slice(...)'",
    "KW": "a keyword 'name='",
    "_SEP": "', '",
    "_DSEP": "': '",
    "_NL": "a newline",
}

_PUNCT = {
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "LBRACE": "'{'", "RBRACE": "'}'",
    "COMMA": "','", "EQUAL": "'='", "COLON": "':'", "DOT": "'.'",
}


def _anonymous(name: str) -> str:
    return _PUNCT.get(name, name.lower())
