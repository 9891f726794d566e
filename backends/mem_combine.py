"""Pictures stacked into one labelled PNG (Pillow), what the documentation does with
``convert a.png b.png c.png -append``, with a title bar over each picture.

A picture wider than ``WIDE`` pixels and than the others is scaled down to the next width (never
below ``MIN_SCALE``), so that one long liveness strip does not leave the rest of the page blank; the
page is capped at ``MAX_PIXELS`` by scaling everything together, before anything is drawn: only
picture headers are read to lay the page out, each picture is then decoded, scaled and pasted in
turn, so memory holds the page and one picture. A picture larger than ``MAX_PIXELS`` by itself
(Graphviz asked to draw a hostile graph) is left out, its title bar saying so.
"""

from __future__ import annotations

import io
import os
import warnings
from functools import lru_cache
from typing import NamedTuple

from layerc.backends.outputs import atomic_open

MARGIN = 16
TITLE_SIZE = 22
MIN_SCALE = 0.6
WIDE = 2400  #: pictures up to this wide are never scaled
MAX_PIXELS = 80_000_000  #: below Pillow's decompression-bomb limit, so viewers open it
MAX_TITLE = 200  #: characters of a title drawn (a kernel's name may be long)


@lru_cache(maxsize=4)
def _font(size: int):
    from PIL import ImageFont

    try:
        from matplotlib import font_manager

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans:bold"), size)
    except Exception:  # no matplotlib font: Pillow's own (it scales since Pillow 10.1)
        return ImageFont.load_default(size=size)


class _Slot(NamedTuple):
    """One picture on the page: its title, its bytes, and its size there (0 x 0: left out)."""

    title: str
    data: bytes
    width: int
    height: int


def _size(data: bytes) -> tuple[int, int] | None:
    """A picture's size from its header alone; None when it is too large to stack or unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                size = im.size
    except (Image.DecompressionBombError, UnidentifiedImageError, OSError, ValueError):
        return None
    return size if size[0] * size[1] <= MAX_PIXELS else None


def _layout(pictures: list[tuple[str, bytes]]) -> list[_Slot]:
    sizes = [_size(data) for _, data in pictures]
    widths = sorted(s[0] for s in sizes if s is not None) or [0]
    # the width most pictures fit (the second widest, at least WIDE): only a strip much wider
    # than the rest is scaled down to it
    target = max(widths[-2] if len(widths) > 1 else widths[-1], WIDE)
    slots = []
    for (title, data), size in zip(pictures, sizes):
        title = title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"
        if size is None:
            slots.append(_Slot(f"{title}  (too large to stack here: see its own file)", data, 0, 0))
            continue
        w, h = size
        if w > target:
            factor = max(target / w, MIN_SCALE)
            w, h = round(w * factor), round(h * factor)
            title += f"  (shown at {factor:.0%})"
        slots.append(_Slot(title, data, w, h))
    return slots


def stack(pictures: list[tuple[str, bytes]]) -> bytes:
    """``(title, PNG bytes)`` pairs, one under the other, each under its title; PNG bytes."""
    from PIL import Image, ImageDraw

    if not pictures:
        raise ValueError("nothing to stack")
    slots = _layout(pictures)
    bar = TITLE_SIZE + 18
    width = max(s.width for s in slots) + 2 * MARGIN
    height = sum(bar + s.height + MARGIN for s in slots) + MARGIN
    f = min(1.0, (MAX_PIXELS / (width * height)) ** 0.5)  # one scale for the whole page

    def at(v: float) -> int:
        return int(v * f)

    page = Image.new("RGB", (max(at(width), 1), max(at(height), 1)), "white")
    draw = ImageDraw.Draw(page)
    font = _font(max(round(TITLE_SIZE * f), 1))
    y = MARGIN
    for s in slots:
        draw.rectangle([0, at(y), at(width), at(y + bar - 4)], fill="#e8edf3")
        draw.text((at(MARGIN), at(y + 7)), s.title, fill="#1b2a3a", font=font)
        y += bar
        if s.width and at(s.width) and at(s.height):
            with Image.open(io.BytesIO(s.data)) as im:
                picture = im.convert("RGB")
            if picture.size != (at(s.width), at(s.height)):
                picture = picture.resize((at(s.width), at(s.height)), Image.Resampling.LANCZOS)
            page.paste(picture, (at(MARGIN), at(y)))
            del picture
        y += s.height + MARGIN
        draw.line([0, at(y - MARGIN // 2), at(width), at(y - MARGIN // 2)], fill="#c0c8d0", width=1)
    out = io.BytesIO()
    page.save(out, format="PNG", optimize=False)
    return out.getvalue()


def write_stack(pictures: list[tuple[str, bytes]], path: str | os.PathLike) -> None:
    data = stack(pictures)
    with atomic_open(path, "wb") as f:
        f.write(data)
