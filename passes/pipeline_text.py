"""The pipeline text ``a,b{k=v}`` (``mlir-opt``'s syntax) parsed by a Lark grammar into pass
specs. Kept apart from the pass manager: a command that builds its passes as objects never loads
Lark."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer

from layerc.grammar._lark import build_parser, run_parser
from layerc.ir.diagnostics import Location, ParseError, clip

SOURCE = "<pipeline>"

_DESCRIBE = {
    "PASS_NAME": "a pass name",
    "ANCHOR": "an anchor such as 'builtin.module('",
    "KEY_EQ": "an option 'key='",
    "NEXT_KEY": "an option ', key='",
    "BARE": "a value",
    "QUOTED": "a quoted value",
    "_COMMA": "','",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "RPAR": "')'",
}


@dataclass(frozen=True)
class PassSpec:
    """One pass as written: its name, raw option values, and where it stands in the text."""

    name: str
    options: dict[str, tuple[str, ...]]
    column: int
    line: int = 1  #: a pipeline may span lines (a shell script's quoted string)


class _SpecBuilder(Transformer[Token, Any]):
    def start(self, c: list[Any]) -> Any:
        return c[-1]  # an anchor, if any, comes first

    def passes(self, c: list[PassSpec]) -> list[PassSpec]:
        return list(c)

    def pass_(self, c: list[Any]) -> PassSpec:
        name = c[0]
        opts = c[1] if len(c) > 1 else {}
        return PassSpec(str(name), opts, name.column, name.line)

    def options(self, c: list[Any]) -> dict[str, tuple[str, ...]]:
        opts: dict[str, tuple[str, ...]] = {}
        for key_tok, value in zip(c[::2], c[1::2]):
            key = key_tok.value.lstrip(",").rstrip("=").strip().replace("-", "_")  # ", key =" over lines too
            if key in opts:
                raise ParseError(f"option '{clip(key)}' given twice", loc=Location(key_tok.line, key_tok.column))
            opts[key] = value
        return opts

    def value(self, c: list[Token]) -> tuple[str, ...]:
        return tuple(v.value[1:-1] if v.type == "QUOTED" else v.value for v in c)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return build_parser("pipeline.lark", ["start"], _SpecBuilder())


def parse_pipeline_text(text: str) -> list[PassSpec]:
    return run_parser(_parser(), text, "start", SOURCE, _DESCRIBE) or []


