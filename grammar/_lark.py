"""What every Lark-based reader shares: loading a grammar once, and turning Lark's
exceptions into located ParseErrors with words a user understands.

Every token passes a watch on its way from the lexer to the parser: it bounds how deep brackets,
parentheses, braces and calls nest (the IR's argument trees are walked recursively, so a deeper
input is refused while it is lexed, before anything is built), and it remembers where the parse
is, so that a callback that cannot digest what it was given fails at that place.
"""

from __future__ import annotations

import gc
import re
from functools import lru_cache
from typing import cast
from importlib import resources

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at


@lru_cache(maxsize=None)
def grammar_text(name: str) -> str:
    """A grammar file's text; one that uses STR_TARGET gets its definition from the op schemas
    (the aten overloads with a string argument: op_schemas.py)."""
    text = resources.files("layerc.grammar").joinpath(name).read_text(encoding="utf-8")
    if "STR_TARGET" in text:
        from layerc.grammar.op_schemas import target_pattern

        text += f"\nSTR_TARGET: /(?:{target_pattern()})/\n"
    return text


@lru_cache(maxsize=None)
def terminal_regex(name: str, terminal: str) -> re.Pattern:
    """The compiled regex of one terminal of a grammar, sub-terminals spliced in."""
    return re.compile(_terminals(name).get_terminal(terminal).pattern.to_regexp())


@lru_cache(maxsize=None)
def _terminals(name: str) -> lark.Lark:
    # Lexer-only mode keeps every terminal, the sub-terminals too.
    first_rule = re.search(r"^(\w+):", grammar_text(name), re.M)
    assert first_rule is not None  # every grammar has a rule
    start = first_rule.group(1)
    return lark.Lark(grammar_text(name), parser=None, lexer="basic", start=start)


#: How deep brackets, parentheses, braces and calls may nest. Real dumps nest a few levels; the
#: limit keeps every recursive walk of an argument tree far from Python's recursion limit.
MAX_NESTING = 100

_OPENERS = frozenset({"LSQB", "LPAR", "LBRACE", "CALL_OPEN"})
_CLOSERS = frozenset({"RSQB", "RPAR", "RBRACE"})
_WHOLE = frozenset({"INT_LIST", "NAME_LIST"})  #: a flat list in one token: a level of its own


class TokenWatch:
    """Lark's post-lexer stage: sees every token of a parse, in order.

    Depth counts the openers and closers of the shared constant grammar, and those a reader adds
    (an AutoDeploy op line's ``target(`` ... ``) : type``, so that an argument nests as deep in
    both syntaxes). A closer of an uncounted opener, such as the ``)`` that ends fx's
    ``call_function[...](args = ...)``, finds the count at zero and leaves it there: the count is
    never less than the nesting of the values being built.
    """

    always_accept = ()

    def __init__(self, openers=(), closers=()):
        self.openers = _OPENERS | frozenset(openers)
        self.closers = _CLOSERS | frozenset(closers)
        self.prev = self.last = None
        self.at_end = False
        #: Where the text being parsed starts in its file, for a piece of a line (parse_piece):
        #: tokens are moved there, and the piece's nesting starts one level down.
        self.at: Location | None = None

    def process(self, stream):
        self.prev = self.last = None
        self.at_end = False
        at = self.at
        depth = 0 if at is None else 1
        openers, closers = self.openers, self.closers
        for tok in stream:
            if at is not None:
                tok.line, tok.column = at.line, tok.column + at.column - 1
            kind = tok.type
            if kind in openers:
                depth += 1
                if depth > MAX_NESTING:
                    raise ParseError(f"nesting deeper than {MAX_NESTING}", loc=Location(tok.line, tok.column))
            elif kind in closers and depth:
                depth -= 1
            elif kind in _WHOLE and depth >= MAX_NESTING:
                raise ParseError(f"nesting deeper than {MAX_NESTING}", loc=Location(tok.line, tok.column))
            self.prev, self.last = self.last, tok
            yield tok
        self.at_end = True

    def location(self) -> Location | None:
        """Where the rule being reduced ends: an LALR parser reduces on seeing the next token
        (``last``), or on the end of the input, after the last token."""
        tok = self.last if self.at_end or self.prev is None else self.prev
        return None if tok is None else Location(tok.line, tok.column)


def build_parser(name: str, start: list[str], transformer=None, openers=(), closers=()) -> lark.Lark:
    """An LALR parser with the contextual lexer; ``transformer`` builds the IR during the parse;
    ``openers`` and ``closers`` name the grammar's own nesting terminals (see TokenWatch).

    With lark-cython installed the same grammar runs on its Cython lexer and parser;
    callbacks read tokens through ``.value`` so both kinds of token work.
    """
    return lark.Lark(
        grammar_text(name),
        parser="lalr",
        lexer="contextual",
        start=start,
        transformer=transformer,
        postlex=TokenWatch(openers, closers),
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
        raise _at_watch(e.orig_exc, parser).with_source(path, text) from None
    except LayercError as e:
        raise _at_watch(e, parser).with_source(path, text) from None
    except (ValueError, TypeError, ArithmeticError, LookupError, SyntaxError, RecursionError) as e:
        # A callback met text it cannot digest (the grammar is looser than the IR): the input's fault.
        raise _at_watch(e, parser).with_source(path, text) from None
    finally:
        if collecting:
            gc.enable()


def parse_piece(parser: lark.Lark, text: str, start: str, at: Location, describe: dict[str, str]):
    """Parse ``text``, one argument a callback cut out of a line at ``at``, inside that line's
    parentheses; every failure is a ParseError at its place in the file (the caller's parse adds
    the file and the line)."""
    watch = cast(TokenWatch, parser.options.postlex)  # build_parser gave it one
    watch.at = at
    try:
        return parser.parse(text, start=start)
    except UnexpectedInput as e:
        # The offset into the piece, not the token's line and column: a token the contextual
        # lexer makes for an error has not passed the watch.
        pos, tok = getattr(e, "pos_in_stream", None), getattr(e, "token", None)
        if pos is None or isinstance(e, UnexpectedEOF) or (tok is not None and tok.type == "$END"):
            pos = len(text)
        raise ParseError(_located(e, text, None, describe).message, loc=Location(at.line, at.column + pos)) from None
    except VisitError as e:
        raise _at_watch(e.orig_exc, parser) from None
    except LayercError as e:
        raise _at_watch(e, parser) from None
    except (ValueError, TypeError, ArithmeticError, LookupError, SyntaxError, RecursionError) as e:
        raise _at_watch(e, parser) from None
    finally:
        watch.at = None


def _at_watch(e: Exception, parser: lark.Lark) -> LayercError:
    """``e`` as a LayercError, placed where the parse was when it has no place of its own."""
    if not isinstance(e, LayercError):
        e = ParseError(f"cannot read this: {type(e).__name__}: {e}")
    watch = parser.options.postlex
    if e.loc is None and isinstance(watch, TokenWatch):
        e.loc = watch.location()
    return e


def _located(e: UnexpectedInput, text: str, path: str | None, describe: dict[str, str]) -> ParseError:
    if isinstance(e, UnexpectedEOF):
        line = text.count("\n") + 1
        col = len(text) - text.rfind("\n")
        msg = "unexpected end of input" + _expected(e.expected, describe)
    elif isinstance(e, UnexpectedCharacters):
        line, col = e.line, e.column
        pos = cast(int, e.pos_in_stream)  # UnexpectedCharacters always has one
        ch = text[pos] if pos < len(text) else ""
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
