"""The text a PDF already has (app/sandbox/pdf_text.py): a born-digital PDF is read from its layer, exactly;
scans, earlier invisible OCR layers, garbage layers and pictures of text beside real text are OCR'd; a
request forces either way; and format=pdf never doubles a layer, as poppler's pdftotext and pypdf read it."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from PIL import Image

from app.config import DecodeLimits
from app.sandbox.documents import load_pages, iter_pages
from app.sandbox.protocol import ProtocolError, text_layer_from_frame
from app.synthetic import render_text_page
from app.testkit.born_digital import (born_digital_pdf, garbage_layer_pdf, mixed_page_pdf,
                                      scanned_with_invisible_layer)
from app.testkit.poppler import pdftotext

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"
SCAN_LINES = ["Scanned invoice 4711", "Total due 99.00 EUR"]


def expected_lines(page: dict) -> list[str]:
    """A page's text in reading order: title, left column, right column, table rows, footer."""
    return ([page["title"]] + page["columns"][0] + page["columns"][1] + [" ".join(row) for row in page["table"]]
            + [page["footer"]])


def layer(data: bytes, mode: str = "auto") -> list:
    return [page.text_layer for page in iter_pages(data, "application/pdf", None, DecodeLimits(), None, mode)]


def scan() -> Image.Image:
    return render_text_page(SCAN_LINES, width=900)


def test_a_born_digital_pdf_is_read_from_its_layer_word_by_word():
    document, truth = born_digital_pdf(2)
    for verdict, page in zip(layer(document), truth):
        assert verdict.use and verdict.note is None
        lines = [" ".join(w.text for w in line.words) for line in verdict.lines]
        words = [w.text for line in verdict.lines for w in line.words]
        assert sorted(words) == sorted(" ".join(expected_lines(page)).split())  # nothing missing, nothing extra
        assert set(page["columns"][0] + page["columns"][1]) <= set(lines)  # columns on one baseline: lines apart
        assert "Paper" in lines and "3.40" in lines  # a table's cells on one baseline: apart too
        for line in verdict.lines:  # word boxes left to right on a band, inside the page
            assert all(a.box[2] <= b.box[0] for a, b in zip(line.words, line.words[1:]))
            assert all(0 <= w.box[0] < w.box[2] <= 1241 and 0 <= w.box[1] < w.box[3] <= 1755 for w in line.words)


def test_pages_that_must_be_ocred_are_refused_with_the_reason():
    hidden = scanned_with_invisible_layer(scan(), "WRONG EARLIER OCR")
    [invisible] = layer(hidden)
    assert not invisible.use and "invisible" in invisible.note
    [garbage] = layer(garbage_layer_pdf(scan()))
    assert not garbage.use and "unmapped" in garbage.note
    [mixed] = layer(mixed_page_pdf(render_text_page(SCAN_LINES * 8, width=900), "A caption in real text"))
    assert not mixed.use and "images" in mixed.note
    assert [page.text_layer for page in load_pages((EXAMPLES / "sample.pdf").read_bytes(), None, None,
                                                   DecodeLimits())] == [None] * 3  # scanned: no layer at all
    assert layer(hidden, "ocr") == [None]
    [forced] = layer(hidden, "layer")
    assert forced.use and [w.text for w in forced.lines[0].words] == ["WRONG", "EARLIER", "OCR"]


def test_a_subverted_decoder_cannot_pass_off_a_malformed_layer():
    good = {"use": True, "lines": [{"box": [0, 0, 10, 5], "words": [{"text": "a", "box": [0, 0, 10, 5]}]}]}
    assert text_layer_from_frame(good, 0.5)["text_layer"][0].quad == [[0, 0], [5, 0], [5, 2.5], [0, 2.5]]
    for bad in ({"use": True, "lines": "x"}, {"use": True, "lines": [7]},
                {"use": True, "lines": [{"box": [0, 0], "words": [{"text": "a", "box": [0, 0, 1, 1]}]}]},
                {"use": True, "lines": [{"box": [0, 0, 1, 1], "words": [{"text": "", "box": [0, 0, 1, 1]}]}]},
                {"use": True, "lines": [{"box": [0, 0, 1, 1], "words": [{"text": "x" * 500, "box": [0, 0, 1, 1]}]}]},
                ["not", "a", "dict"]):
        with pytest.raises(ProtocolError):
            text_layer_from_frame(bad, 1.0)


def ocr(client, document: bytes, **params):
    params.setdefault("structure", "auto")  # the session's service reads lines only unless asked (conftest.py)
    answer = client.post("/v1/ocr", content=document, headers={"content-type": "application/pdf"}, params=params)
    assert answer.status_code == 200, answer.text
    return answer


def test_the_service_reads_the_layer_exactly_and_forced_ocr_reads_the_same_pages(client):
    document, truth = born_digital_pdf(3)
    pages = ocr(client, document).json()["pages"]
    for page, drawn in zip(pages, truth):
        assert page["text_source"] == "pdf_text" and page["rotation"] == 0
        lines = [line for line in page["text"].split("\n") if line.strip()]
        assert lines == expected_lines(drawn)  # exact, and in reading order: columns one after the other
        assert [r["type"] for r in page["regions"]].count("table") == 1
        [table] = page["tables"]
        assert [[c["text"] for c in table["cells"] if c["row"] == r] for r in range(table["rows"])] == drawn["table"]
    forced = ocr(client, document, pdf_text="ocr").json()["pages"]
    assert {page["text_source"] for page in forced} == {"ocr"}
    assert "Annual statement 2020" in forced[0]["text"]


def test_a_scan_with_an_earlier_invisible_layer_is_ocred_and_its_pdf_holds_our_text_once(client):
    hidden = scanned_with_invisible_layer(scan(), "WRONG EARLIER OCR")
    [page] = ocr(client, hidden).json()["pages"]
    assert page["text_source"] == "ocr" and page["text"].split("\n") == SCAN_LINES
    assert any("invisible" in note for note in page["notes"])
    searchable = ocr(client, hidden, format="pdf").content
    assert "WRONG" not in pdftotext(searchable)  # the earlier layer is replaced, as --redo-ocr does
    assert pdftotext(searchable).split() == " ".join(SCAN_LINES).split()


@pytest.mark.parametrize("pdf_text", ["auto", "ocr"])
def test_the_searchable_pdf_of_a_born_digital_pdf_holds_each_word_once(client, pdf_text):
    from pypdf import PdfReader

    document, _ = born_digital_pdf(2)
    searchable = ocr(client, document, format="pdf", pdf_text=pdf_text).content
    words = Counter(pdftotext(document).split())
    assert Counter(pdftotext(searchable).split()) == words
    read_by_pypdf = Counter(" ".join(p.extract_text() for p in PdfReader(io.BytesIO(searchable)).pages).split())
    assert read_by_pypdf == words


def test_our_layer_has_real_spaces_for_readers_that_do_not_infer_them(client):
    from pypdf import PdfReader

    lines = ["The Linn Sequencer is a state of the art device", "Seven words on the second line here"]
    image = render_text_page(lines, width=1400)
    out = io.BytesIO()
    image.save(out, format="PNG")
    searchable = client.post("/v1/ocr", content=out.getvalue(), headers={"content-type": "image/png"},
                             params={"format": "pdf"}).content
    text = PdfReader(io.BytesIO(searchable)).pages[0].extract_text()
    assert [line.split() for line in text.splitlines() if line.strip()] == [line.split() for line in lines]
