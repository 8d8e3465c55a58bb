"""Fraktur read by two engines: PP-OCR's lines, and Tesseract's Fraktur model on the same page,
word by word the better reading kept (issue 29).

PP-OCR has no Fraktur model: it reads the long s (ſ) as f or j ("ift", "fich", "jehr"), k as f
("fommen"), V as B ("Bernunft"). Tesseract's `script/Fraktur` model reads those, and makes errors
of its own ("ſi<" for "sich", stray stops, a line it misses). Where both read a line, each pair
of words that differ is settled, in this order (measured on the devset's Fraktur lines,
load/fraktur.py, docs/measurements.md "Fraktur"):
1. a PP-OCR reading that is no word but becomes one with its f or j read as a long s, is that word;
2. a word of the German word list (deu.traineddata's own) beats one that is not;
3. otherwise the reading more like German spelling wins: the mean log-probability of its letter
   trigrams, counted over the same word list.
Each PP-OCR box gets the Tesseract words whose centre lies in it (Tesseract often sees one line
across a row where PP-OCR sees two boxes; matched by line, both boxes got the whole line). Words both
read alike keep PP-OCR's spelling, and a chosen word keeps PP-OCR's punctuation around it (Tesseract's
Fraktur model adds stray stops and quotes); a box with no Tesseract word keeps PP-OCR's reading.

Which pages: a request's `lang=deu-frak` says so; `lang=auto` (the default) finds them two ways:
- on a page, from PP-OCR's own reading: words that are no German word but become one with f or j
  read as ſ (a page has words enough for that, and the look costs nothing);
- on a line image or a snippet (at most SMALL_LINES lines of Latin letters, where a line has too few
  words to misread), and on a page where some of PP-OCR's words but fewer than LONG_S_SHARE are such
  misreadings (a hint, not yet proof), from the letters' shapes: Tesseract's Fraktur model reads it (tens
  of milliseconds for a line), and the input is Fraktur where that reading has a long s (ſ). The model writes
  ſ only for the long s's shape, which Antiqua type does not have (on the devset's Latin pages and
  lines it wrote none; on its Fraktur page and three of its five Fraktur lines, the ſ of the ground
  truth). That reading is the one the vote then uses: no line image is read by Tesseract twice.
Tesseract's own script detection (OSD) was measured and not used: on the devset's Fraktur lines it
finds too few characters to answer, and it named a Latin receipt Cyrillic.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
from collections import Counter
from typing import Optional

from app.engines.tesseract import PUNCTUATION, WordList, plain_word
from app.engines.word_boxes import words_by_share
from app.errors import one_of
from app.schemas import TextLine

LANGS = ("auto", "deu-frak", "latin")  # a request's `lang`: auto finds Fraktur pages; the others say
LONG_S_MISREAD = "fj"  # what PP-OCR reads a long s as
LONG_S_SHARE = 0.02  # a page is Fraktur where at least this share of its words (and one) are such misreadings
MATCH_OVERLAP = 0.5  # two engines' lines are one where they share this much of the lower one's height
SMALL_LINES = 3  # an input of at most this many PP-OCR lines is looked at by Tesseract for Fraktur letters
LONG_S = "ſ"  # a letter only Fraktur (blackletter) type has, as Tesseract's Fraktur model writes it


def parse_lang(value: Optional[str]) -> Optional[str]:
    """A request's `lang`, checked; None where it set none."""
    return one_of(value, LANGS, "lang")


class Spelling:
    """The word list, and a letter-trigram model of it for words neither engine spells as a word."""

    def __init__(self, words: WordList):
        self._words = words

    @functools.cached_property
    def _counts(self) -> tuple[Counter, Counter]:
        """Letter trigrams and bigrams of the word list, counted on first use (a second at load for
        every replica, where most never see a Fraktur page)."""
        trigrams: Counter = Counter()
        bigrams: Counter = Counter()
        for word in self._words.words:
            marked = "^^" + word.lower() + "$"
            for i in range(len(marked) - 2):
                trigrams[marked[i:i + 3]] += 1
                bigrams[marked[i:i + 2]] += 1
        return trigrams, bigrams

    def knows(self, word: str) -> bool:
        return self._words.knows(word)

    def likeness(self, word: str) -> float:
        """Mean log-probability of the word's letter trigrams (add-0.1 smoothed), higher is more German."""
        plain = plain_word(word).lower()
        if not plain:
            return -10.0
        marked = "^^" + plain + "$"
        trigrams, bigrams = self._counts
        return sum(math.log((trigrams[marked[i:i + 3]] + 0.1) / (bigrams[marked[i:i + 2]] + 6.0))
                   for i in range(len(marked) - 2)) / (len(marked) - 2)

    def long_s_fix(self, word: str) -> Optional[str]:
        """The word with some of its f or j read as s, where that is a word and the word is not."""
        if self.knows(word):
            return None
        spots = [i for i, char in enumerate(word) if char in LONG_S_MISREAD][:4]
        for count in range(1, len(spots) + 1):
            for chosen in itertools.combinations(spots, count):
                letters = list(word)
                for i in chosen:
                    letters[i] = "s"
                candidate = "".join(letters)
                if self.knows(candidate):
                    return candidate
        return None

    def long_s_misreadings(self, lines: list[TextLine]) -> tuple[int, int]:
        """(words that are no word but become one with f or j read as ſ, words)."""
        words = [word for line in lines for word in line.text.split() if plain_word(word)]
        return sum(self.long_s_fix(word) is not None for word in words), len(words)

    def looks_like_fraktur(self, lines: list[TextLine]) -> bool:
        misread, words = self.long_s_misreadings(lines)
        return misread >= max(1, LONG_S_SHARE * words)

    def better_word(self, ppocr: str, tesseract: str) -> str:
        fixed = self.long_s_fix(ppocr)
        if fixed:
            return fixed
        known_p, known_t = self.knows(ppocr), self.knows(tesseract)
        if known_p != known_t:
            return ppocr if known_p else tesseract
        return tesseract if self.likeness(tesseract) > self.likeness(ppocr) else ppocr

    def merge(self, ppocr: str, tesseract: str) -> str:
        """One line read by both: their words aligned, each difference settled (the module's rules)."""
        a, b = ppocr.split(), tesseract.split()
        matcher = difflib.SequenceMatcher(None, [plain_word(w) for w in a], [plain_word(w) for w in b], autojunk=False)
        merged: list[str] = []
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            mine, theirs = a[i1:i2], b[j1:j2]
            if op == "equal" or not theirs:
                merged += mine
            elif not mine:
                merged += theirs if any(map(self.knows, theirs)) else []  # words only Tesseract saw, if words
            elif len(mine) == len(theirs):
                merged += [_with_punctuation_of(p, self.better_word(p, t)) for p, t in zip(mine, theirs)]
            else:  # split or joined differently: the side with more words of the list, then the more German
                score = [(sum(map(self.knows, side)), sum(map(self.likeness, side)) / len(side))
                         for side in (mine, theirs)]
                merged += theirs if score[1] > score[0] else mine
        return " ".join(merged)


def _with_punctuation_of(ppocr: str, chosen: str) -> str:
    """The chosen word's letters between PP-OCR's punctuation: Tesseract's Fraktur model adds stray
    stops and quotes around words ("ihre.", "„der"), PP-OCR rarely."""
    letters, core = chosen.strip(PUNCTUATION), ppocr.strip(PUNCTUATION)
    if chosen == ppocr or not letters or not core:
        return chosen
    start = ppocr.index(core)
    return ppocr[:start] + letters + ppocr[start + len(core):]


def _bounds(quad) -> tuple[float, float, float, float]:
    xs, ys = [p[0] for p in quad], [p[1] for p in quad]
    return min(xs), min(ys), max(xs), max(ys)


def _inside(word, line_bounds) -> bool:
    """A Tesseract word is in a PP-OCR line where its centre is within the line's span and the two
    share MATCH_OVERLAP of the lower one's height: two PP-OCR boxes on one row each get their words."""
    x0, y0, x1, y1 = _bounds(word.quad)
    lx0, ly0, lx1, ly1 = line_bounds
    shared = max(0.0, min(y1, ly1) - max(y0, ly0)) / max(1e-6, min(y1 - y0, ly1 - ly0))
    return lx0 <= (x0 + x1) / 2 <= lx1 and shared >= MATCH_OVERLAP


def combine(ppocr_lines: list[TextLine], tesseract_lines: list[TextLine], spelling: Spelling) -> list[TextLine]:
    """PP-OCR's lines (its boxes), each read again with the Tesseract words inside its box."""
    words = [word for line in tesseract_lines for word in line.words]
    combined = []
    for line in ppocr_lines:
        bounds = _bounds(line.quad)
        theirs = sorted((word for word in words if _inside(word, bounds)), key=lambda word: _bounds(word.quad)[0])
        if not theirs:
            combined.append(line)
            continue
        text = spelling.merge(line.text, " ".join(word.text for word in theirs))
        if text == line.text:
            combined.append(line)
        else:
            combined.append(TextLine(quad=line.quad, text=text, confidence=line.confidence,
                                     words=words_by_share(line.quad, text, line.confidence)))
    return combined


def latin_letters(lines: list[TextLine]) -> bool:
    """Whether most of the letters PP-OCR read are Latin ones (a Chinese snippet is not worth a look)."""
    letters = [char for line in lines for char in line.text if char.isalpha()]
    return bool(letters) and sum(char.isascii() or char in "äöüÄÖÜß" for char in letters) >= len(letters) / 2


def has_fraktur_letters(lines: list[TextLine]) -> bool:
    return any(LONG_S in line.text for line in lines)


class FrakturPass:
    """What the ppocr engine asks after reading a page: is it Fraktur, and if so, both engines' words."""

    def __init__(self, configured_tessdata: Optional[str], threads: int):
        from app.engines.tesseract import TesseractReader, tessdata_dir

        where = tessdata_dir(configured_tessdata)
        self._reader = TesseractReader(where, "Fraktur", threads)
        self._spelling = Spelling(WordList(where, "deu"))

    def second_reading(self, rgb, lines: list[TextLine], lang: Optional[str]) -> Optional[list[TextLine]]:
        """Tesseract's Fraktur reading of a page that is Fraktur (the module's rules), or None: the page is
        read by PP-OCR alone. A Latin line image costs one Tesseract reading here and is left as PP-OCR read it."""
        if lang == "deu-frak":
            return self._reader.read(rgb)
        if lang not in (None, "auto"):
            return None
        found, theirs = self.finds(rgb, lines)
        if not found:
            return None
        return theirs if theirs is not None else self._reader.read(rgb)

    def finds(self, rgb, lines: list[TextLine]) -> tuple[bool, Optional[list[TextLine]]]:
        """(Fraktur?, Tesseract's reading where the finding made one) for `lang=auto`: the long-s test on
        PP-OCR's words; then, on a line image or snippet of Latin letters, or a page where that test found a
        hint but no proof (some misreadings, under LONG_S_SHARE), Tesseract's look for Fraktur letters."""
        if not lines:
            return False, None
        misread, words = self._spelling.long_s_misreadings(lines)
        if misread >= max(1, LONG_S_SHARE * words):
            return True, None
        if (misread or len(lines) <= SMALL_LINES) and latin_letters(lines):  # a hint, or too few words for one
            theirs = self._reader.read(rgb)
            return has_fraktur_letters(theirs), theirs
        return False, None

    def apply(self, rgb, lines: list[TextLine], lang: Optional[str]) -> Optional[list[TextLine]]:
        """PP-OCR's lines read again with Tesseract's words where the page is Fraktur; None where it is not."""
        theirs = self.second_reading(rgb, lines, lang)
        return None if theirs is None else combine(lines, theirs, self._spelling)
