"""The byte-level mutations every hostile-input suite draws (flip, truncate, splice, delete, line
edits), and the k-th match a format's own mutations edit. Positions are taken modulo what the
data holds, so every draw applies."""

from __future__ import annotations

import itertools
import re

from hypothesis import strategies as st

POSITION = st.integers(0, 1 << 20)

#: the draws of the shared mutations, by kind (a suite picks the ones its format takes)
BASIC = {
    "flip": st.tuples(st.just("flip"), POSITION, st.integers(1, 255)),
    "truncate": st.tuples(st.just("truncate"), POSITION),
    "splice": st.tuples(st.just("splice"), POSITION, st.integers(1, 400), POSITION),
    "delete": st.tuples(st.just("delete"), POSITION, st.integers(1, 400)),
    "line": st.tuples(st.just("line"), POSITION, st.sampled_from(["dup", "drop", "swap"])),
}


def nth(rx: re.Pattern[bytes], data: bytes, k: int, among: int | None = None) -> re.Match[bytes] | None:
    """The k-th match of ``rx`` (modulo how many there are, among the first ``among`` when a
    mutated input may hold millions); None when there is none."""
    found = list(itertools.islice(rx.finditer(data), among))
    return found[k % len(found)] if found else None


def replace_nth(rx: re.Pattern[bytes], data: bytes, k: int, text: bytes, among: int | None = None) -> bytes:
    """``data`` with the k-th match of ``rx`` replaced by ``text`` (unchanged without a match)."""
    hit = nth(rx, data, k, among)
    return data[: hit.start()] + text + data[hit.end() :] if hit else data


def basic(data: bytes, m: tuple) -> bytes | None:
    """``data`` with the mutation ``m`` of one of BASIC's kinds applied; None for another kind."""
    kind, k, *rest = m
    n = max(len(data), 1)
    if kind == "flip":
        pos = k % n
        return data[:pos] + bytes([data[pos] ^ rest[0]]) + data[pos + 1 :] if data else data
    if kind == "truncate":
        return data[: k % n]
    if kind == "splice":  # a stretch of the data put in again elsewhere
        start, length, at = k % n, rest[0], rest[1] % n
        return data[:at] + data[start : start + length] + data[at:]
    if kind == "delete":
        start = k % n
        return data[:start] + data[start + rest[0] :]
    if kind == "line":
        lines = data.split(b"\n")
        i = k % len(lines)
        if rest[0] == "dup":
            lines.insert(i, lines[i])
        elif rest[0] == "drop":
            del lines[i]
        else:
            j = (i + 1) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    return None
