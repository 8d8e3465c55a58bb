"""Fraktur pages and lines set here with known text (issue 40): German prose from the Grimms' tales (1857,
public domain) with the long s where the old orthography puts it, in Debian's `fonts-blankenburg` (a
blackletter with the long s; SIL OFL 1.1; installed by .ci/run), lightly blurred as a scan is.
load/fraktur.py reads them beside the devset's Fraktur; tests/test_fraktur.py sets its lines the same way.
A set is the same on every machine: fixed texts, fixed sizes, no randomness.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

BLACKLETTER = "/usr/share/fonts/truetype/blankenburg/Blankenburg_UNZ1A.ttf"
TALES = (
    "Es war einmal eine kleine süße Dirne, die hatte jedermann lieb, der sie nur ansah, am allerliebsten aber "
    "ihre Großmutter, die wußte gar nicht, was sie alles dem Kinde geben sollte. Einmal schenkte sie ihm ein "
    "Käppchen von rotem Sammet, und weil ihm das so wohl stand und es nichts anders mehr tragen wollte, hieß es "
    "nur das Rotkäppchen.",
    "Vor einem großen Walde wohnte ein armer Holzhacker mit seiner Frau und seinen zwei Kindern; das Bübchen "
    "hieß Hänsel und das Mädchen Gretel. Er hatte wenig zu beißen und zu brechen, und einmal, als große Teuerung "
    "ins Land kam, konnte er das tägliche Brot nicht mehr schaffen.",
    "In den alten Zeiten, wo das Wünschen noch geholfen hat, lebte ein König, dessen Töchter waren alle schön, "
    "aber die jüngste war so schön, daß die Sonne selber, die doch so vieles gesehen hat, sich verwunderte, "
    "sooft sie ihr ins Gesicht schien.",
    "Ein Müller hatte drei Söhne, seine Mühle, einen Esel und einen Kater; die Söhne mußten mahlen, der Esel "
    "Getreide holen und Mehl forttragen und die Katze die Mäuse wegfangen. Als der Müller starb, teilten sich "
    "die drei Söhne in die Erbschaft.",
)
LINES = ("Am Faſtnachtsdienstag", "Des Hauſes Herr", "Ein Brief aus Baſel", "Der Geiſt der Geſetze")


def long_s(text: str) -> str:
    """The old orthography's long s, roughly: every s but one that ends a word (Haus, das, bis)."""
    return re.sub(r"s(?=[A-Za-zäöüß])", "ſ", text)


def font(size: int) -> ImageFont.FreeTypeFont:
    if not Path(BLACKLETTER).is_file():
        raise FileNotFoundError(f"{BLACKLETTER} missing: Debian's fonts-blankenburg (.ci/run installs it)")
    return ImageFont.truetype(BLACKLETTER, size)


def set_line(text: str, size: int = 40) -> np.ndarray:
    """One line of blackletter, RGB."""
    face = font(size)
    image = Image.new("RGB", (int(face.getlength(text)) + size, int(size * 1.75)), "white")
    ImageDraw.Draw(image).text((size // 2, size // 4), text, font=face, fill="black")
    return np.asarray(image)


def set_page(text: str, size: int = 34, width: int = 800) -> tuple[np.ndarray, str]:
    """(RGB page, its text line by line): `text` in long-s spelling, wrapped to `width`, blurred a little."""
    face, words, lines = font(size), long_s(text).split(), [""]
    for word in words:
        joined = f"{lines[-1]} {word}".strip()
        if face.getlength(joined) > width - 100 and lines[-1]:
            lines.append(word)
        else:
            lines[-1] = joined
    step = int(size * 1.5)
    image = Image.new("L", (width, 80 + step * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((50, 40 + step * row), line, font=face, fill=0)
    return np.asarray(image.filter(ImageFilter.GaussianBlur(0.8)).convert("RGB")), "\n".join(lines)


def fraktur_set() -> list[tuple[str, str, np.ndarray, str]]:
    """(name, kind, RGB pixels, text): the tales as pages, and a few lines."""
    pages = [(f"set_page_{index}", "page", *set_page(tale)) for index, tale in enumerate(TALES)]
    return pages + [(f"set_line_{index}", "line", set_line(text), text) for index, text in enumerate(LINES)]
