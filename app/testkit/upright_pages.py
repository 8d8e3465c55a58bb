"""Upright pages whose text runs several ways, made with the bundled font: the test set for the
orientation step's abstention (tests/test_orientation_abstains.py, load/orientation_upright.py).

A product box: a title across, a few lines of copy across, and one to three smaller pieces turned
(a label up the side, a sticker upside down, a barcode caption along an edge). A form: fields and
values across, in two columns, and nothing turned. Every page is upright: whatever the finder says,
the right answer is 0. Pages are drawn from a seed, so a set is the same on every machine.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw, ImageFont

WORDS = ("natural", "organic", "coffee", "roasted", "blend", "fresh", "premium", "quality", "since", "harvest",
         "dark", "chocolate", "tea", "green", "honey", "mountain", "valley", "farm", "select", "reserve",
         "invoice", "customer", "address", "date", "amount", "total", "signature", "account", "number", "office")
TURNS = (90, 180, 270)


def _phrase(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize()


def _text_image(text: str, size: int, ink: str, paper: str) -> Image.Image:
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("RGB", (right - left + size, bottom - top + size), paper)
    ImageDraw.Draw(image).text((size // 2 - left, size // 2 - top), text, fill=ink, font=font)
    return image


def product_box(seed: int) -> Image.Image:
    """Mostly text across (a title and a few lines of copy); two to four pieces turned 90, 180 or
    270 degrees, together a third of the text or more: labels up the sides, stickers upside down."""
    rng = random.Random(seed)
    width, height = rng.choice(((1200, 1600), (1600, 1200), (1400, 1400)))
    paper = rng.choice(("white", "#f4efe4", "#e8f1f8", "#fbe3d6"))
    page = Image.new("RGB", (width, height), paper)
    margin = 260  # the sides are kept for the turned pieces
    y = 120
    title = _text_image(_phrase(rng, 2).upper(), rng.randint(70, 100), "black", paper)
    page.paste(title, ((width - title.width) // 2, y))
    y += title.height + 50
    for _ in range(rng.randint(2, 5)):
        line = _text_image(_phrase(rng, rng.randint(3, 5)), rng.randint(36, 48), "#222222", paper)
        if line.width < width - 2 * margin:
            page.paste(line, (margin, y))
        y += line.height + rng.randint(10, 30)
    turns = [rng.choice(TURNS) for _ in range(rng.randint(2, 4))]
    sides = {90: 20, 270: width - 20}
    stickers_y = max(y + 40, height - 420)
    for turn in turns:
        piece = _text_image(_phrase(rng, rng.randint(2, 4)), rng.randint(34, 52), "#333333", "#fff6a8")
        piece = piece.rotate(turn, expand=True)  # PIL turns counter-clockwise: the piece reads turned
        if turn == 180:  # a sticker in the lower part of the box
            x = rng.randint(margin, max(margin, width - piece.width - margin))
            page.paste(piece, (x, min(stickers_y, height - piece.height - 20)))
            stickers_y += piece.height + 30
        else:  # a label up or down a side, next to the last one on that side
            x = sides[turn] if turn == 90 else sides[turn] - piece.width
            if piece.width + 20 < margin:
                page.paste(piece, (x, rng.randint(60, max(60, height - piece.height - 60))))
            sides[turn] = x + piece.width + 20 if turn == 90 else x - 20
    return page


def form(seed: int) -> Image.Image:
    """A form: labels and values across, in two columns; nothing turned."""
    rng = random.Random(seed)
    width, height = 1240, 1754
    page = Image.new("RGB", (width, height), "white")
    header = _text_image(_phrase(rng, 3).upper(), 60, "black", "white")
    page.paste(header, (80, 80))
    y = 80 + header.height + 60
    while y < height - 120:
        for column in (0, 1):
            label = _text_image(f"{rng.choice(WORDS).capitalize()}: {rng.randint(10, 99999)}", 32, "black", "white")
            page.paste(label, (80 + column * 580, y))
        y += 70
    return page


def upright_set(mixed: int, plain: int, seed: int = 29) -> list[tuple[str, Image.Image]]:
    """(name, page): `mixed` product boxes with turned pieces, then `plain` forms."""
    return ([(f"product_box_{seed + i}", product_box(seed + i)) for i in range(mixed)]
            + [(f"form_{seed + i}", form(seed + i)) for i in range(plain)])
