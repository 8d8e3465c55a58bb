"""Fraktur read by two engines (issue 29): the word vote against Tesseract's own German word list,
the `tesseract` engine behind the protocol, and `lang` over real HTTP. Debian's traineddata
(tesseract-ocr-script-frak, -deu, -eng) are installed by .ci/run."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from PIL import Image

from app.config import Settings
from app.engines import build_engine
from app.engines.fraktur import Spelling, combine
from app.engines.tesseract import TesseractEngine, WordList, tessdata_dir
from app.schemas import TextLine
from app.synthetic import png_bytes, render_text_page

GERMAN_LINES = ["Der Gebrauch seiner Vernunft", "muss jederzeit frei sein", "und zwar ohne Fremde"]


@pytest.fixture(scope="module")
def spelling() -> Spelling:
    return Spelling(WordList(tessdata_dir(Settings().tesseract.tessdata_dir), "deu"))


def test_the_word_list_is_german(spelling):
    assert spelling.knows("Vernunft") and spelling.knows("sich") and spelling.knows("ſind")  # a long s is an s
    assert not spelling.knows("Bernunft") and not spelling.knows("fich") and not spelling.knows("ift")


@pytest.mark.parametrize("ppocr, tesseract, expected", [
    # PP-OCR's long s read as f: the word it becomes wins, whatever Tesseract made of it
    ("weil fie fich zuleßt", "weil ſie ſi< zulebt", "weil sie sich"),
    # a word of the list beats a misreading, either way round
    ("seiner Bernunft in", "ſeiner Vernunft in", "seiner Vernunft in"),
    ("Daher kann ein", "Daher fann ein", "Daher kann ein"),
    # neither is a word: the more German spelling
    ("Schlaftrunfen, im", "Schlaftrunken, im", "Schlaftrunken, im"),
])
def test_each_pair_of_words_keeps_the_better_reading(spelling, ppocr, tesseract, expected):
    assert unicodedata.normalize("NFKC", spelling.merge(ppocr, tesseract)).startswith(expected)  # ſ is an s


def test_words_read_alike_keep_ppocrs_spelling_and_a_stray_mark_is_dropped(spelling):
    assert spelling.merge("ihre Urheber gewesen", "ihre. Urheber „ geweſen") == "ihre Urheber gewesen"


def test_a_page_is_told_fraktur_from_ppocrs_long_s_misreadings(spelling):
    def lines(*texts):
        return [TextLine(quad=[[0, 0], [9, 0], [9, 9], [0, 9]], text=t, confidence=0.9) for t in texts]

    assert spelling.looks_like_fraktur(lines("Hier ift überall Einschränkung", "fondern neue Vorurtheile"))
    assert not spelling.looks_like_fraktur(lines("Hier ist überall Einschränkung", "sondern neue Vorurtheile"))
    assert not spelling.looks_like_fraktur(lines("TOTAL AMOUNT 57.80", "THANK YOU PLEASE COME AGAIN"))


def test_each_ppocr_box_gets_the_tesseract_words_inside_it_and_an_unmatched_one_keeps_its_reading(spelling):
    from app.engines.word_boxes import TextWord

    def quad(x0, y, x1):
        return [[x0, y], [x1, y], [x1, y + 20], [x0, y + 20]]

    def ppocr(x0, y, x1, text):
        return TextLine(quad=quad(x0, y, x1), text=text, confidence=0.9)

    # Tesseract saw one line across the row where PP-OCR saw two boxes: each box gets only its words
    row = [("Bernunft", 0, 90), ("hier", 100, 140), ("ift", 300, 330), ("frei", 340, 380)]
    tesseract = [TextLine(quad=quad(0, 42, 380), text="Vernunft hier iſt frei", confidence=0.8,
                          words=[TextWord(quad(x0, 42, x1), t.replace("Bernunft", "Vernunft").replace("ift", "iſt"), 0.8)
                                 for t, x0, x1 in row])]
    merged = combine([ppocr(0, 0, 200, "weil fich"), ppocr(0, 40, 150, "Bernunft hier"), ppocr(290, 40, 390, "ift frei")],
                     tesseract, spelling)
    assert [unicodedata.normalize("NFKC", m.text) for m in merged] == ["weil fich", "Vernunft hier", "ist frei"]
    assert [w.text for w in merged[1].words] == ["Vernunft", "hier"]


def test_the_chosen_word_keeps_ppocrs_punctuation(spelling):
    assert spelling.merge("die, oder deren Borgånger, ihre", "die, oder- deren Vorgänger. ihre") == \
        "die, oder deren Vorgänger, ihre"


def test_the_tesseract_engine_reads_a_page_into_lines_and_words():
    engine = build_engine(Settings(engine="tesseract", tesseract={"model": "eng"}), threads=1)
    assert isinstance(engine, TesseractEngine)
    engine.load()
    [result] = engine.infer([np.asarray(render_text_page(GERMAN_LINES))])
    assert [line.text for line in result.lines] == GERMAN_LINES
    first = result.lines[0]
    assert [w.text for w in first.words] == GERMAN_LINES[0].split()
    xs = [w.quad[0][0] for w in first.words]
    assert xs == sorted(xs) and all(0 < w.confidence <= 1 for w in first.words)


# -- Fraktur found from the letters' shapes (issue 40): Debian's fonts-blankenburg, a blackletter type
# with the long s, installed by .ci/run; the lines are set here with known text --

FRAKTUR_LINE = "Am Faſtnachtsdienstag"  # PP-OCR reads "faftnachtsdienstag": no word of the list, fixed or not


def blackletter_line(text: str) -> np.ndarray:
    from app.testkit.fraktur_pages import set_line

    return set_line(text)


@pytest.fixture(scope="module")
def fraktur_pass():
    from app.engines.fraktur import FrakturPass

    return FrakturPass(Settings().tesseract.tessdata_dir, threads=1)


def test_a_line_image_is_told_fraktur_from_its_letters_and_an_antiqua_one_is_not(fraktur_pass):
    """A line has too few words for PP-OCR's long-s misreadings to show (this one's PP-OCR reading has
    none the word test counts, as here): Tesseract's Fraktur model looks at it, and the long s it reads says
    Fraktur. The same German words in Antiqua, and a page of more than SMALL_LINES lines, are not looked at
    that way, and a Chinese snippet is never handed to Tesseract."""
    from app.engines.fraktur import SMALL_LINES

    def lines(*texts):
        return [TextLine(quad=[[0, 0], [9, 0], [9, 9], [0, 9]], text=t, confidence=0.9) for t in texts]

    fraktur = blackletter_line(FRAKTUR_LINE)
    found, reading = fraktur_pass.finds(fraktur, lines("Die Geschichte"))
    assert found and "ſ" in " ".join(line.text for line in reading)
    antiqua = np.asarray(render_text_page(GERMAN_LINES[:1]))
    assert fraktur_pass.finds(antiqua, lines(GERMAN_LINES[0]))[0] is False
    many = lines(*(["Die Geschichte"] * (SMALL_LINES + 1)))
    assert fraktur_pass.finds(fraktur, many) == (False, None)  # a page: the word test alone, no second reading
    assert fraktur_pass.finds(fraktur, lines("历史并不简单")) == (False, None)


def test_a_page_with_one_long_s_misreading_too_few_to_prove_it_is_looked_at_and_found(fraktur_pass):
    """One misreading among 60 words is under the word test's 2%: a hint, on which Tesseract looks at the
    page's letters; the same words on an Antiqua page are looked at and left alone."""
    from app.testkit.fraktur_pages import TALES, set_page

    def lines(*texts):
        return [TextLine(quad=[[0, 0], [9, 0], [9, 9], [0, 9]], text=t, confidence=0.9) for t in texts]

    words = lines("Es war einmal eine kleine Dirne ift", *(["die hatte jedermann lieb der sie nur ansah"] * 7))
    assert not fraktur_pass._spelling.looks_like_fraktur(words)
    page, _ = set_page(TALES[0])
    found, reading = fraktur_pass.finds(page, words)
    assert found and reading
    antiqua = np.asarray(render_text_page(["Es war einmal eine kleine Dirne", "die hatte jedermann lieb"] * 3))
    found, reading = fraktur_pass.finds(antiqua, words)
    assert not found and reading  # looked at, not Fraktur


def test_tesseract_reads_a_strip_of_two_lines_as_two_lines():
    """A strip under 192 px high and four times as wide is read as one block, not one line: as one line,
    this strip of two blackletter lines came back empty."""
    from app.engines.tesseract import TesseractReader
    from app.testkit.fraktur_pages import TALES, set_page

    strip, text = set_page(TALES[2], width=1400)
    assert strip.shape[0] < 192 and strip.shape[1] > 4 * strip.shape[0] and text.count("\n") == 1
    lines = TesseractReader(tessdata_dir(Settings().tesseract.tessdata_dir), "Fraktur", 1).read(strip)
    assert len(lines) == 2
    assert edits(text.replace("\n", " "), " ".join(line.text for line in lines)) <= 0.1 * len(text)


# -- over HTTP --

def ocr(client, png: bytes, **params):
    response = client.post("/v1/ocr", params=params, files={"file": ("page.png", png, "image/png")})
    return response


def test_lang_chooses_the_fraktur_pass_per_request(client):
    page = png_bytes(render_text_page(GERMAN_LINES))
    hinted = ocr(client, page, lang="deu-frak")
    assert hinted.status_code == 200, hinted.text
    [result] = hinted.json()["pages"]
    assert "read as Fraktur by PP-OCR and Tesseract" in result["notes"]
    assert result["text"].split() == " ".join(GERMAN_LINES).split()  # both engines read a clean page alike
    [plain] = ocr(client, page, lang="latin").json()["pages"]
    [auto] = ocr(client, page).json()["pages"]
    assert plain["notes"] == [] and auto["notes"] == []  # nothing on this page looks like Fraktur


def test_a_fraktur_line_is_read_by_both_engines_without_a_hint(client):
    """`lang=auto`, the default, reads a blackletter line as `lang=deu-frak` does, and better than PP-OCR
    alone (`lang=latin`), though PP-OCR's reading has no long-s misreading the word test counts: its
    letters found it. An Antiqua line of German stays as PP-OCR reads it (the test above)."""
    line = png_bytes(Image.fromarray(blackletter_line(FRAKTUR_LINE)))
    [auto] = ocr(client, line).json()["pages"]
    [hinted] = ocr(client, line, lang="deu-frak").json()["pages"]
    [alone] = ocr(client, line, lang="latin").json()["pages"]
    assert auto["notes"] == ["read as Fraktur by PP-OCR and Tesseract"] and alone["notes"] == []
    assert auto["text"] == hinted["text"]
    assert edits(FRAKTUR_LINE, auto["text"]) < edits(FRAKTUR_LINE, alone["text"])


def edits(truth: str, read: str) -> int:
    """Levenshtein distance after NFKC (the long s is an s) and case folding."""
    a, b = (unicodedata.normalize("NFKC", text).casefold() for text in (truth, read))
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (char != other))
    return row[-1]


def test_an_unknown_lang_is_a_400(client):
    response = ocr(client, png_bytes(render_text_page(GERMAN_LINES)), lang="klingon")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"


def test_a_job_keeps_the_requests_lang(client):
    from app.testkit.jobs import wait_finished

    page = png_bytes(render_text_page(GERMAN_LINES))
    hinted = client.post("/v1/jobs", data={"lang": "deu-frak"}, files={"file": ("p.png", page, "image/png")})
    plain = client.post("/v1/jobs", files={"file": ("p.png", page, "image/png")})
    assert hinted.status_code == plain.status_code == 202, hinted.text
    for job in (hinted, plain):
        assert wait_finished(client, job.json()["id"])["status"] == "succeeded"
    notes = [client.get(f"/v1/jobs/{job.json()['id']}/result").json()["pages"][0]["notes"] for job in (hinted, plain)]
    assert notes == [["read as Fraktur by PP-OCR and Tesseract"], []]


def test_without_the_traineddata_the_engine_serves_and_a_deu_frak_page_says_why(tmp_path):
    from app.engines.ppocr import PPOCREngine

    engine = build_engine(Settings(tesseract={"tessdata_dir": str(tmp_path)}), threads=1)
    assert isinstance(engine, PPOCREngine)
    engine.load()  # warns; does not fail
    page = np.asarray(render_text_page(GERMAN_LINES))
    [asked, auto] = engine.infer([page, page], langs=["deu-frak", "auto"])
    assert [line.text for line in asked.lines] == GERMAN_LINES
    assert len(asked.notes) == 1 and "Fraktur pass is unavailable" in asked.notes[0]
    assert str(tmp_path) not in asked.notes[0]  # the server's paths stay in its log
    assert auto.notes == [] and engine.info.details["fraktur_pass"] is False
