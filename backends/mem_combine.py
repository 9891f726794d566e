"""Pictures stacked into one labelled PNG (Pillow), what the documentation does with
``convert a.png b.png c.png -append``, with a title bar over each picture.

A picture wider than ``WIDE`` pixels and than the others is scaled down to the next width (never
below ``MIN_SCALE``), so that one long liveness strip does not leave the rest of the page blank; the
result is capped at ``MAX_PIXELS`` by scaling everything together.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache

from layerc.backends.outputs import atomic_open

MARGIN = 16
TITLE_SIZE = 22
MIN_SCALE = 0.6
WIDE = 2400  #: pictures up to this wide are never scaled
MAX_PIXELS = 80_000_000  #: below Pillow's decompression-bomb limit, so viewers open it


@lru_cache(maxsize=4)
def _font(size: int):
    from PIL import ImageFont

    try:
        from matplotlib import font_manager

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans:bold"), size)
    except Exception:  # no matplotlib font: Pillow's own (it scales since Pillow 10.1)
        return ImageFont.load_default(size=size)


def stack(pictures: list[tuple[str, bytes]]) -> bytes:
    """``(title, PNG bytes)`` pairs, one under the other, each under its title; PNG bytes."""
    from PIL import Image, ImageDraw

    images = [(title, Image.open(io.BytesIO(data)).convert("RGB")) for title, data in pictures]
    if not images:
        raise ValueError("nothing to stack")
    widths = sorted(im.width for _, im in images)
    # the width most pictures fit (the second widest, at least WIDE): only a strip much wider
    # than the rest is scaled down to it
    target = max(widths[-2] if len(widths) > 1 else widths[-1], WIDE)
    scaled = []
    for title, im in images:
        if im.width > target:
            factor = max(target / im.width, MIN_SCALE)
            im = im.resize((round(im.width * factor), round(im.height * factor)), Image.LANCZOS)
            title += f"  (shown at {factor:.0%})"
        scaled.append((title, im))
    font = _font(TITLE_SIZE)
    bar = TITLE_SIZE + 18
    width = max(im.width for _, im in scaled) + 2 * MARGIN
    height = sum(bar + im.height + MARGIN for _, im in scaled) + MARGIN
    overall = 1.0
    if width * height > MAX_PIXELS:
        overall = (MAX_PIXELS / (width * height)) ** 0.5
    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    y = MARGIN
    for title, im in scaled:
        draw.rectangle([0, y, width, y + bar - 4], fill="#e8edf3")
        draw.text((MARGIN, y + 7), title, fill="#1b2a3a", font=font)
        y += bar
        page.paste(im, (MARGIN, y))
        y += im.height + MARGIN
        draw.line([0, y - MARGIN // 2, width, y - MARGIN // 2], fill="#c0c8d0", width=1)
    if overall < 1.0:
        page = page.resize((int(width * overall), int(height * overall)), Image.LANCZOS)
    out = io.BytesIO()
    page.save(out, format="PNG", optimize=False)
    return out.getvalue()


def write_stack(pictures: list[tuple[str, bytes]], path: str | os.PathLike) -> None:
    data = stack(pictures)
    with atomic_open(path, "wb") as f:
        f.write(data)
