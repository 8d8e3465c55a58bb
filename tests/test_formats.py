"""/v1/ocr?format=pdf|hocr|alto|markdown through the session's service, held to outside references:
poppler's pdftotext reads the searchable PDF's text and word boxes back, PDFium renders its pages,
hocr-spec checks the hOCR and the shipped ALTO 4.4 schema the ALTO."""

from __future__ import annotations

import io

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from app.formats.validate import alto_schema
from app.synthetic import pdf_bytes, png_bytes, render_text_page
from app.testkit.hocr_check import hocr_problems
from app.testkit.poppler import pdftotext, word_offsets
from load.metrics import cer

LINES = ["Deed of sale 1897", "Parcel 412 Wiesenweg", "Recorded by the clerk", "Fee paid 3 Mark 20"]
EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def ocr(client, document: bytes, content_type: str, form: str, **params):
    answer = client.post("/v1/ocr", content=document, headers={"content-type": content_type},
                         params={"format": form, **params})
    assert answer.status_code == 200, answer.text
    return answer


def page_image() -> Image.Image:
    return render_text_page(LINES, width=1100)


def jpeg_with_exif_turn(upright: Image.Image) -> bytes:
    """Stored a quarter turn anticlockwise, with EXIF orientation 6 (turn clockwise to view)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    upright.rotate(90, expand=True).save(out, format="JPEG", quality=95, exif=exif.tobytes())
    return out.getvalue()


def sideways_png(upright: Image.Image) -> bytes:
    """Scanned a quarter turn clockwise, with nothing saying so: the orientation step must find it."""
    return png_bytes(upright.rotate(-90, expand=True))


CASES = {
    "upright image": lambda: (png_bytes(page_image()), "image/png", 0),
    "image turned by EXIF": lambda: (jpeg_with_exif_turn(page_image()), "image/jpeg", 0),
    "page the orientation step turned": lambda: (sideways_png(page_image()), "image/png", 270),
    "PDF page": lambda: (pdf_bytes([page_image()], 120), "application/pdf", 0),
    # 4,200 pixels wide: past twice the engine's 2,000, so the JPEG is decoded at half size (DCT scaling)
    "JPEG decoded at reduced size": lambda: (jpeg(render_text_page(LINES, width=4200, font_size=150)), "image/jpeg", 0),
}


def jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95)
    return out.getvalue()


def json_words(page: dict) -> list:
    return [(w["text"], w["bbox"]) for block in page["blocks"] for w in block["words"]]


@pytest.mark.parametrize("case", CASES)
def test_pdftotext_places_every_word_within_2_percent_of_its_json_box(client, case):
    document, content_type, rotation = CASES[case]()
    (page,) = ocr(client, document, content_type, "json").json()["pages"]
    assert page["rotation"] == rotation and len(json_words(page)) >= 14
    searchable = ocr(client, document, content_type, "pdf").content
    width, height = pdfium.PdfDocument(searchable)[0].get_size()  # as displayed: after /Rotate
    aspect = page["width"] / page["height"]
    assert abs(width / height - aspect) < 0.01 * aspect  # the displayed page has the page's shape
    for text, off in word_offsets(page, searchable):
        assert off is not None, f"{text!r} is not in the PDF's text ({case}): {pdftotext(searchable)!r}"
        assert off <= 0.02, f"{text!r} is {off:.3f} of the page off its JSON box ({case})"


def test_the_text_layer_reads_back_as_the_json_text_for_the_sample_pdf_and_an_image(client):
    for document, content_type in ((EXAMPLES.joinpath("sample.pdf").read_bytes(), "application/pdf"),
                                   (EXAMPLES.joinpath("sample-page.png").read_bytes(), "image/png"),
                                   (png_bytes(render_text_page(LINES + ["Zeugen: Anna Huber, Josef Maier"])),
                                    "image/png")):
        answer = ocr(client, document, content_type, "json").json()
        searchable = ocr(client, document, content_type, "pdf")
        assert searchable.headers["content-type"] == "application/pdf"
        edits, length = cer(answer["text"], pdftotext(searchable.content))
        assert length > 20 and edits / length <= 0.01, (answer["text"], pdftotext(searchable.content))


def test_the_searchable_pdf_of_a_pdf_renders_pixel_identical_to_the_original(client):
    original = EXAMPLES.joinpath("sample.pdf").read_bytes()
    searchable = ocr(client, original, "application/pdf", "pdf").content
    assert searchable != original and "Section" in pdftotext(searchable)
    before, after = pdfium.PdfDocument(original), pdfium.PdfDocument(searchable)
    assert len(before) == len(after) == 3
    for index in range(3):
        a = before[index].render(scale=2).to_numpy()
        b = after[index].render(scale=2).to_numpy()
        assert a.shape == b.shape and np.array_equal(a, b), f"page {index + 1} renders differently"


def test_a_selection_of_pages_gives_those_pages(client):
    original = EXAMPLES.joinpath("sample.pdf").read_bytes()
    searchable = ocr(client, original, "application/pdf", "pdf", pages="2-3").content
    text = pdftotext(searchable)
    assert len(pdfium.PdfDocument(searchable)) == 2 and "TWO" in text and "THREE" in text and "ONE" not in text


def test_hocr_and_alto_of_a_page_are_valid_and_carry_every_word(client):
    from hocr_spec import HocrValidator

    document = png_bytes(page_image())
    page = ocr(client, document, "image/png", "json").json()["pages"][0]
    hocr = ocr(client, document, "image/png", "hocr")
    assert hocr.headers["content-type"].startswith("application/xhtml+xml")
    report = HocrValidator("standard").validate(io.BytesIO(hocr.content), parse_strict=True, filename="answer.hocr")
    assert report.is_valid(), report.format("text")
    assert hocr_problems(hocr.content) == []  # what hocr-spec does not check: classes, nesting, boxes
    alto = ocr(client, document, "image/png", "alto")
    alto_schema().validate(io.BytesIO(alto.content))
    for text, _ in json_words(page):
        assert f">{text}</span>" in hocr.text and f'CONTENT="{text}"' in alto.text


def test_markdown_format_is_the_pages_markdown(client):
    document = png_bytes(page_image())
    page = ocr(client, document, "image/png", "json").json()["pages"][0]
    markdown = ocr(client, document, "image/png", "markdown")
    assert markdown.headers["content-type"].startswith("text/markdown") and markdown.text == page["markdown"] + "\n"


def test_an_unknown_format_is_400_before_the_upload_is_read(client):
    answer = client.post("/v1/ocr", content=b"x" * 10, params={"format": "docx"}, headers={"content-type": "image/png"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_format"


def test_a_job_kept_for_its_searchable_pdf_gives_every_format_and_one_not_kept_says_why(client):
    from app.testkit.jobs import wait_finished

    document = EXAMPLES.joinpath("sample.pdf").read_bytes()
    files = {"file": ("sample.pdf", document, "application/pdf")}
    kept = client.post("/v1/jobs", files=files, params={"keep_document": "true"}).json()
    plain = client.post("/v1/jobs", files=files).json()
    assert kept["document_kept"] is True and plain["document_kept"] is False
    for job in (kept, plain):
        assert wait_finished(client, job["id"])["status"] == "succeeded"
    body = client.get(kept["result_url"]).json()
    searchable = client.get(kept["result_url"], params={"format": "pdf"})
    assert searchable.status_code == 200 and searchable.headers["content-type"] == "application/pdf"
    edits, length = cer(body["text"], pdftotext(searchable.content))
    assert edits / length <= 0.01
    alto_schema().validate(io.BytesIO(client.get(kept["result_url"], params={"format": "alto"}).content))
    assert b"ocr_page" in client.get(plain["result_url"], params={"format": "hocr"}).content
    refused = client.get(plain["result_url"], params={"format": "pdf"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "document_not_kept"
    bad = client.post("/v1/jobs", files=files, params={"keep_document": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_keep_document"
    for job in (kept, plain):
        client.delete(job["status_url"])


def hostile_pdf() -> bytes:
    """A scan that acts: JavaScript on open and in the name tree, a page event, a launch link, an attached
    file and a form field's script; beside them a web link, which stays."""
    import pikepdf

    pdf = pikepdf.open(io.BytesIO(pdf_bytes([render_text_page(["Quarterly report"])], 100)))
    script = pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String("app.alert('owned')"))
    pdf.Root.OpenAction = pdf.make_indirect(script)
    attached = pikepdf.AttachedFileSpec(pdf, b"MZ payload", filename="invoice.exe")
    pdf.attachments["invoice.exe"] = attached
    pdf.Root.Names.JavaScript = pikepdf.Dictionary(Names=pikepdf.Array([pikepdf.String("x"), script]))
    page = pdf.pages[0]
    page.obj.AA = pikepdf.Dictionary(O=pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String("1")))
    launch = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[0, 0, 50, 50],
                                A=pikepdf.Dictionary(S=pikepdf.Name.Launch, F=pikepdf.String("cmd.exe")))
    web = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[60, 0, 110, 50],
                             A=pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String("https://intranet.local/")))
    field = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Widget, FT=pikepdf.Name.Tx,
                               T=pikepdf.String("f"), Rect=[120, 0, 170, 50],
                               AA=pikepdf.Dictionary(K=pikepdf.Dictionary(S=pikepdf.Name.JavaScript,
                                                                          JS=pikepdf.String("2"))))
    page.obj.Annots = pdf.make_indirect(pikepdf.Array([pdf.make_indirect(a) for a in (launch, web, field)]))
    pdf.Root.AcroForm = pikepdf.Dictionary(Fields=pikepdf.Array([page.obj.Annots[2]]))
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def poppler_says(tool: list, data: bytes, tmp_path) -> str:
    import subprocess

    path = tmp_path / "doc.pdf"
    path.write_bytes(data)
    return subprocess.run(tool + [str(path)], capture_output=True, text=True, check=True, timeout=60).stdout


def test_the_searchable_pdf_of_a_pdf_that_acts_keeps_its_page_and_web_link_and_nothing_that_acts(client, tmp_path):
    """Issue 37.5: the output kept the stranger's /OpenAction, scripts and embedded files. Poppler reads both."""
    import pikepdf

    original = hostile_pdf()
    assert "app.alert" in poppler_says(["pdfinfo", "-js"], original, tmp_path)
    assert "invoice.exe" in poppler_says(["pdfdetach", "-list"], original, tmp_path)
    answer = ocr(client, original, "application/pdf", "pdf")
    assert answer.status_code == 200, answer.text
    assert "app.alert" not in poppler_says(["pdfinfo", "-js"], answer.content, tmp_path)
    assert poppler_says(["pdfdetach", "-list"], answer.content, tmp_path).startswith("0 embedded files")
    assert "Quarterly" in pdftotext(answer.content)
    with pikepdf.open(io.BytesIO(answer.content)) as written:
        dump = b"".join(obj.unparse(resolved=True) for obj in written.objects
                        if isinstance(obj, (pikepdf.Dictionary, pikepdf.Array)))
        assert b"/OpenAction" not in dump and b"/JavaScript" not in dump and b"/Launch" not in dump
        assert b"/AA" not in dump and b"/EmbeddedFile" not in dump
        assert b"https://intranet.local/" in dump  # a plain link is kept
