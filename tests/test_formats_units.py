"""Word boxes and the searchable PDF's text layer without Ray, read back by poppler where a PDF is made."""

from __future__ import annotations

import io

import pikepdf
import pytest

from app.config import DecodeLimits
from app.engines.word_boxes import words_by_share, words_from_parts
from app.formats.alto import render_alto
from app.formats.hocr import render_hocr
from app.formats.validate import alto_schema
from app.sandbox.searchable import write_searchable_pdf
from app.synthetic import pdf_bytes, png_bytes, render_text_page
from app.testkit.poppler import pdftotext, pdftotext_words

QUAD = [[0, 0], [100, 0], [100, 10], [0, 10]]


def test_cjk_characters_are_merged_into_the_lines_tokens():
    parts = [("中", 0.9, [[0, 0], [10, 0], [10, 10], [0, 10]]), ("文", 0.8, [[10, 0], [20, 0], [20, 10], [10, 10]]),
             ("OK", 0.95, [[30, 0], [50, 0], [50, 10], [30, 10]])]
    words = words_from_parts("中文 OK", parts, QUAD, 0.9)
    assert [(w.text, w.quad[0][0], w.quad[1][0], w.confidence) for w in words] == [("中文", 0, 20, 0.8), ("OK", 30, 50, 0.95)]


def test_parts_that_do_not_spell_the_line_give_shares_of_the_quad():
    words = words_from_parts("ab cd", [("xx", 1.0, QUAD)], QUAD, 0.7)
    assert [(w.text, w.quad[0][0], w.quad[1][0]) for w in words] == [("ab", 0, 40), ("cd", 60, 100)]
    # read upside down, the text starts at the quad's bottom-right corner
    turned = words_by_share([QUAD[2], QUAD[3], QUAD[0], QUAD[1]], "ab cd", 0.7)
    assert [(w.text, w.quad[0][0], w.quad[1][0]) for w in turned] == [("ab", 100, 60), ("cd", 40, 0)]


def page_result(words, width=1000, height=200, rotation=0, text=None, page_number=1):
    blocks = [{"text": " ".join(t for t, _ in words), "bbox": [0, 0, 1, 1], "confidence": 0.9, "line": 0,
               "words": [{"text": t, "bbox": list(b), "confidence": 0.9} for t, b in words]}] if words else []
    return {"page_number": page_number, "width": width, "height": height, "dpi": None, "rotation": rotation,
            "text": text if text is not None else " ".join(t for t, _ in words), "blocks": blocks}


def blank_png(width=1000, height=200) -> bytes:
    from PIL import Image

    return png_bytes(Image.new("RGB", (width, height), "white"))


def test_chinese_and_accented_words_read_back_as_written():
    words = [("Grundbuch", (50, 50, 250, 90)), ("Straße", (280, 50, 420, 90)), ("土地登记", (460, 50, 620, 90)),
             ("Ærø", (650, 50, 720, 90))]
    pdf = write_searchable_pdf(blank_png(), "image/png", [page_result(words)], DecodeLimits())
    assert pdftotext(pdf).split() == ["Grundbuch", "Straße", "土地登记", "Ærø"]


def test_touching_word_boxes_still_read_as_two_words():
    pdf = write_searchable_pdf(blank_png(), "image/png", [page_result([("MASAI", (100, 50, 200, 80)),
                                                                  ("JOHOR", (200, 50, 300, 80))])], DecodeLimits())
    assert pdftotext(pdf).split() == ["MASAI", "JOHOR"]
    ((_, _, words),) = pdftotext_words(pdf)
    assert words[0][1][2] < words[1][1][0]  # the first word ends before the second begins


def test_a_page_without_boxes_is_searchable_and_named_in_the_document_info():
    markdown_page = page_result([], text="# Title\n\nA paragraph of text\nwith two lines")
    pdf = write_searchable_pdf(blank_png(), "image/png", [markdown_page], DecodeLimits())
    assert pdftotext(pdf).split() == "# Title A paragraph of text with two lines".split()
    with pikepdf.open(io.BytesIO(pdf)) as opened:
        assert str(opened.docinfo["/OCRTextOnlyPages"]) == "1"
    hocr = render_hocr([markdown_page], "vlm")
    assert b'<meta name="text-only-pages" content="1" />' in hocr and b'class="ocrx_word"' not in hocr
    assert_valid_hocr(hocr)
    alto = render_alto([markdown_page], "vlm")
    alto_schema().validate(io.BytesIO(alto))
    assert b"QUALITY_DETAIL=\"text only" in alto and b"HPOS=\"0\" VPOS=\"0\"" in alto  # only the PrintSpace placed


def test_a_failed_page_keeps_its_image_without_text_and_is_listed():
    document = pdf_bytes([render_text_page(["first"]), render_text_page(["second"])])
    pages = [page_result([("first", (40, 40, 200, 100))]), {"page_number": 2, "error": {"code": "ocr_failed"}}]
    pdf = write_searchable_pdf(document, "application/pdf", pages, DecodeLimits())
    with pikepdf.open(io.BytesIO(pdf)) as opened:
        assert len(opened.pages) == 2 and str(opened.docinfo["/OCRFailedPages"]) == "2"
    assert pdftotext(pdf).split() == ["first"]
    alto_schema().validate(io.BytesIO(render_alto(pages, "ppocr")))
    hocr = render_hocr(pages, "ppocr")
    assert b'<meta name="failed-pages" content="2" />' in hocr
    assert_valid_hocr(hocr)


def assert_valid_hocr(document: bytes) -> None:
    from hocr_spec import HocrValidator

    from app.testkit.hocr_check import hocr_problems

    report = HocrValidator("standard").validate(io.BytesIO(document), parse_strict=True, filename="answer.hocr")
    assert report.is_valid(), report.format("text")
    assert hocr_problems(document) == []


def test_hocr_that_breaks_the_spec_is_caught_where_hocr_spec_lets_it_pass():
    from hocr_spec import HocrValidator

    from app.testkit.hocr_check import hocr_problems

    good = render_hocr([page_result([("word", (10, 10, 50, 50)), ("two", (60, 10, 90, 50))])], "ppocr")
    assert_valid_hocr(good)
    for broken in (good.replace(b'class="ocr_line"', b'class="ocr_lnie"'),  # no such class
                   good.replace(b'title="bbox 10 10 50 50; x_wconf 90"', b'title="x_wconf 90"'),  # a word without bbox
                   good.replace(b"bbox 60 10 90 50", b"bbox 60 10 1090 50")):  # past its line and the page
        assert HocrValidator("standard").validate(io.BytesIO(broken), parse_strict=True).is_valid()  # its gap
        assert hocr_problems(broken)


def test_a_broken_alto_fails_the_schema():
    alto = render_alto([page_result([("word", (1, 1, 20, 20))])], "ppocr").replace(b'CONTENT="word"', b"")
    with pytest.raises(Exception, match="CONTENT"):
        alto_schema().validate(io.BytesIO(alto))


def test_boxes_past_the_page_edge_are_clipped_so_the_text_layer_stays_on_the_page():
    """A line image 39 pixels high whose detected quad reaches y=49 (uw3_test_010001 of the devset)."""
    from app.engines.word_boxes import words_by_share
    from app.pipeline.postprocess import build_page_result
    from app.schemas import EngineResult, PageOCR, PagePayload, TextLine

    quad = [[2, -5], [300, -5], [300, 49], [2, 49]]
    line = TextLine(quad=quad, text="The problem", confidence=0.9, words=words_by_share(quad, "The problem", 0.9))
    payload = PagePayload("r", 0, 1, None, 400, 39, 400, 39, 1.0)
    page = build_page_result(PageOCR(payload, EngineResult(lines=[line]), 1, 1))
    boxes = [page["blocks"][0]["bbox"]] + [w["bbox"] for w in page["blocks"][0]["words"]]
    assert all(0 <= y <= 39 for box in boxes for y in (box[1], box[3])), boxes
    pdf = write_searchable_pdf(blank_png(400, 39), "image/png", [page], DecodeLimits())
    assert pdftotext(pdf).split() == ["The", "problem"]


def test_a_pdf_its_owner_locked_stays_locked_and_searchable():
    from pypdf import PdfReader, PdfWriter

    source = pdf_bytes([render_text_page(["Owner locked"])])
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(source)))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-256", permissions_flag=0)
    locked = io.BytesIO()
    writer.write(locked)
    words = [("Owner", (40, 40, 200, 100)), ("locked", (230, 40, 400, 100))]
    pdf = write_searchable_pdf(locked.getvalue(), "application/pdf", [page_result(words)], DecodeLimits())
    assert pdftotext(pdf).split() == ["Owner", "locked"]
    with pikepdf.open(io.BytesIO(pdf)) as opened:
        assert opened.is_encrypted and not opened.allow.modify_other


def test_control_characters_in_text_or_a_file_name_keep_hocr_and_alto_well_formed():
    import xml.etree.ElementTree as ET

    page = page_result([("Rech\x01nung", (10, 10, 90, 50)), ("\x1bNr", (100, 10, 150, 50))])
    hocr = render_hocr([page], "ppocr")
    alto = render_alto([page], "ppocr", file_name="scan\x0c.png")
    for document in (hocr, alto):
        ET.fromstring(document)  # well-formed: ElementTree would have written the characters raw
    assert "Rech\ufffdnung" in hocr.decode() and "scan\ufffd.png" in alto.decode()
    assert_valid_hocr(hocr)
    alto_schema().validate(io.BytesIO(alto))


def test_regions_become_the_hocr_and_alto_elements_the_specs_name():
    page = page_result([("Annual", (10, 10, 90, 50))])
    page["blocks"] += [{"text": "Paper 12", "bbox": [0, 60, 200, 90], "confidence": 0.9, "line": 1, "region": 1,
                        "words": [{"text": "Paper", "bbox": [10, 60, 80, 90], "confidence": 0.9},
                                  {"text": "12", "bbox": [120, 60, 150, 90], "confidence": 0.9}]},
                       {"text": "Page 3", "bbox": [0, 150, 100, 180], "confidence": 0.9, "line": 2, "region": 2,
                        "words": [{"text": "Page", "bbox": [10, 150, 60, 180], "confidence": 0.9},
                                  {"text": "3", "bbox": [70, 150, 80, 180], "confidence": 0.9}]}]
    page["blocks"][0]["region"] = 0
    page["regions"] = [{"type": "title", "bbox": [10, 10, 90, 50], "text": "Annual", "table": None},
                       {"type": "table", "bbox": [0, 55, 200, 95], "text": "Paper 12", "table": 0},
                       {"type": "footer", "bbox": [0, 145, 100, 185], "text": "Page 3", "table": None},
                       {"type": "figure", "bbox": [300, 10, 600, 150], "text": "", "table": None}]
    hocr = render_hocr([page], "ppocr")
    assert_valid_hocr(hocr)
    for element in (b'<div class="ocr_title"', b'class="ocr_table"', b'class="ocr_footer"', b'class="ocr_image"'):
        assert element in hocr
    alto = render_alto([page], "ppocr")
    alto_schema().validate(io.BytesIO(alto))
    assert b'<ComposedBlock ID="composed_1_2" TYPE="table"' in alto and b'TAGREFS="TAG_footer"' in alto
    assert b'<Illustration ID="illustration_1_4"' in alto
