"""Decoding and rasterising, without Ray: every bad input maps to its typed error."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from app.config import Limits
from app.sandbox.documents import iter_pages, load_pages, sniff_kind
from app.sandbox.page_selection import parse_page_spec
from app.page_size import InputBudget, as_rgb, fit_to_budget
from app.errors import BadRequest, PayloadTooLarge, UnprocessableDocument, UnsupportedMediaType
from tests.conftest import pdf_bytes, png_bytes

LIMITS = Limits(max_pages=4, max_image_pixels=1_000_000, pdf_dpi=72, max_pdf_page_pixels=2_000_000)


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "spec, expected",
    [(None, [0, 1, 2, 3, 4, 5]), ("", [0, 1, 2, 3, 4, 5]), ("1-3", [0, 1, 2]), ("6,2", [1, 5]), ("2-3,3", [1, 2]), ("5-", [4, 5])],
)
def test_page_spec(spec, expected):
    assert parse_page_spec(spec, 6, max_pages=10) == expected


@pytest.mark.parametrize("spec", ["0", "3-1", "7", "a-b", "-2", "1,,2"])
def test_bad_page_spec(spec):
    with pytest.raises(BadRequest) as caught:
        parse_page_spec(spec, 6, max_pages=10)
    assert caught.value.code == "invalid_pages"


def test_page_limit_counts_selected_pages():
    assert parse_page_spec("1-2", 100, max_pages=2) == [0, 1]
    with pytest.raises(PayloadTooLarge, match="max_pages=2"):
        parse_page_spec(None, 3, max_pages=2)


def test_sniff_trusts_bytes_over_declared_type():
    pdf = pdf_bytes([Image.new("RGB", (50, 50), "white")])
    assert sniff_kind(pdf, "application/octet-stream") == "pdf"
    assert sniff_kind(pdf, None) == "pdf"
    assert sniff_kind(encoded(Image.new("RGB", (5, 5)), "JPEG"), "application/pdf") == "image"
    with pytest.raises(UnsupportedMediaType):
        sniff_kind(b"plain words", None)
    with pytest.raises(UnsupportedMediaType):
        sniff_kind(encoded(Image.new("RGB", (5, 5)), "PNG"), "text/html")
    with pytest.raises(BadRequest):
        sniff_kind(b"", "image/png")


@pytest.mark.parametrize("mode", ["RGB", "L", "1", "RGBA", "LA", "P", "CMYK", "I;16"])
def test_every_common_mode_decodes_to_l_or_rgb(mode):
    image = Image.new("RGB", (40, 30), "white").convert(mode)
    fmt = "TIFF" if mode in ("CMYK", "I;16") else "PNG"
    [page] = load_pages(encoded(image, fmt), None, None, LIMITS)
    assert page.image.mode in ("L", "RGB")
    assert page.image.size == (40, 30)


def test_transparent_pixels_become_white():
    image = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    [page] = load_pages(png_bytes(image), "image/png", None, LIMITS)
    assert page.image.convert("L").getpixel((5, 5)) == 255


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (60, 20), "white")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    [page] = load_pages(encoded(image, "JPEG", exif=exif), "image/jpeg", None, LIMITS)
    assert page.image.size == (20, 60)


def test_multipage_tiff_is_one_page_per_frame():
    frames = [Image.new("L", (30, 30), shade) for shade in (0, 128, 255)]
    data = encoded(frames[0], "TIFF", save_all=True, append_images=frames[1:])
    pages = load_pages(data, "image/tiff", "2-3", LIMITS)
    assert [p.page_number for p in pages] == [2, 3]
    assert pages[1].image.getpixel((1, 1)) == 255


def test_pixel_limit_is_checked_before_decoding():
    with pytest.raises(PayloadTooLarge, match="max_image_pixels"):
        load_pages(png_bytes(Image.new("L", (1001, 1000))), "image/png", None, LIMITS)


def test_pdf_pages_render_at_configured_dpi():
    pdf = pdf_bytes([Image.new("RGB", (144, 72), "white"), Image.new("RGB", (72, 72), "white")])  # at 100 dpi
    pages = load_pages(pdf, "application/pdf", None, LIMITS)
    assert [p.page_number for p in pages] == [1, 2]
    assert pages[0].dpi == 72
    assert abs(pages[0].image.width - 144 * 72 / 100) <= 1


def test_oversized_pdf_page_renders_at_lower_dpi():
    pdf = pdf_bytes([Image.new("RGB", (3000, 3000), "white")])  # 30 in square at 100 dpi
    [page] = load_pages(pdf, "application/pdf", None, Limits(pdf_dpi=150, max_pdf_page_pixels=1_000_000))
    assert page.image.width * page.image.height <= 1_000_000
    assert page.dpi < 150


def test_broken_and_encrypted_pdfs():
    with pytest.raises(UnprocessableDocument) as caught:
        load_pages(b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF", None, None, LIMITS)
    assert caught.value.code == "corrupt_pdf"
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([Image.new("RGB", (50, 50))]))))
    writer.encrypt(user_password="pw", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(UnprocessableDocument) as caught:
        load_pages(buffer.getvalue(), None, None, LIMITS)
    assert caught.value.code == "encrypted_pdf"


def test_fit_to_budget_only_shrinks():
    image = Image.new("RGB", (4000, 1000))
    resized, scale = fit_to_budget(image, max_side=2000, max_pixels=10**9)
    assert resized.size == (2000, 500) and scale == 0.5
    resized, scale = fit_to_budget(image, max_side=5000, max_pixels=1_000_000)
    assert resized.width * resized.height <= 1_000_000 and scale == pytest.approx(0.5)
    same, scale = fit_to_budget(Image.new("RGB", (10, 10)), 2000, 10**6)
    assert scale == 1.0 and same.size == (10, 10)


def text_block(size: tuple[int, int]) -> Image.Image:
    """White page, a black bar in its left quarter: where it lands tells the geometry apart."""
    image = Image.new("RGB", size, "white")
    image.paste((0, 0, 0), (0, 0, size[0] // 4, size[1]))
    return image


def test_a_large_jpeg_is_decoded_at_reduced_size_and_keeps_its_source_geometry():
    data = encoded(text_block((4000, 1000)), "JPEG", quality=95)
    [full] = load_pages(data, "image/jpeg", None, Limits(max_image_pixels=10**8))
    [page] = iter_pages(data, "image/jpeg", None, Limits(max_image_pixels=10**8), InputBudget(900, 10**8))
    assert full.image.size == full.source == (4000, 1000)
    assert page.image.size == (1000, 250)  # DCT scaling by 1/4: still at least 900 wide, the target
    assert page.source == (4000, 1000)  # boxes stay in the uploaded image's pixels
    assert page.image.getpixel((200, 125))[0] < 40 and page.image.getpixel((300, 125))[0] > 215


def test_reduced_jpeg_decode_reports_the_upright_source_size():
    exif = Image.Exif()
    exif[0x0112] = 6  # turned a quarter on display: the source is 1000 wide and 4000 high
    data = encoded(text_block((4000, 1000)), "JPEG", exif=exif)
    [page] = iter_pages(data, "image/jpeg", None, Limits(max_image_pixels=10**8), InputBudget(900, 10**8))
    assert page.image.size == (250, 1000) and page.source == (1000, 4000)


def test_a_jpeg_that_needs_less_than_half_its_size_is_decoded_whole():
    data = encoded(text_block((1200, 300)), "JPEG")
    [page] = iter_pages(data, "image/jpeg", None, LIMITS, InputBudget(1000, 10**6))
    assert page.image.size == page.source == (1200, 300) and page.source_size is None


def test_a_pdf_page_renders_straight_at_the_target_size():
    pdf = pdf_bytes([text_block((1700, 2200))])  # 17 x 22 in at 100 dpi
    limits = Limits(pdf_dpi=150, max_pdf_page_pixels=50_000_000)
    [page] = iter_pages(pdf, "application/pdf", None, limits, InputBudget(2000, 2000 * 2000))
    [whole] = load_pages(pdf, "application/pdf", None, limits)
    assert page.dpi == 150 and page.source == whole.image.size  # boxes in the page at 150 dpi, as before
    assert abs(page.source[0] - 2550) <= 1 and abs(page.source[1] - 3300) <= 1
    assert max(page.image.size) <= 2000 and max(page.image.size) >= 1995  # nothing left to resize
    assert fit_to_budget(page.image, 2000, 2000 * 2000)[1] == 1.0
    [small] = iter_pages(pdf, "application/pdf", None, limits, InputBudget(5000, 50_000_000))
    assert small.image.size == small.source == whole.image.size and small.source_size is None


def test_grey_pixels_reach_the_engine_as_rgb():
    grey = np.full((3, 4), 7, dtype=np.uint8)
    assert as_rgb(grey).shape == (3, 4, 3) and int(as_rgb(grey)[2, 3, 1]) == 7
    rgb = np.zeros((3, 4, 3), dtype=np.uint8)
    assert as_rgb(rgb) is rgb


def test_page_counts_are_checked_before_anything_is_built():
    # 2**31 pages claimed: a list of them would need 17 GB; the check must come first.
    with pytest.raises(PayloadTooLarge) as caught:
        parse_page_spec(None, 2**31, max_pages=50)
    assert "2147483648" in caught.value.message
    with pytest.raises(PayloadTooLarge):
        parse_page_spec("1-2000000000", 2**31, max_pages=50)
    assert parse_page_spec("1-3,2-4,4", 2**31, max_pages=4) == [0, 1, 2, 3]  # overlaps count once
    with pytest.raises(BadRequest):
        parse_page_spec("1," * 600, 10, max_pages=10)  # an absurdly long selection


def test_apng_claiming_2_31_frames_is_413_at_once():
    from load.hostile import apng_frame_bomb

    with pytest.raises(PayloadTooLarge) as caught:
        load_pages(apng_frame_bomb(), "image/png", None, LIMITS)
    assert caught.value.code == "too_many_pages"


@pytest.mark.parametrize("name", ["tiff-cut-50", "tiff-cut-99", "tiff-ifd-past-end", "tiff-ifd-garbage"])
def test_damaged_tiffs_are_422_not_500(name):
    from load.hostile import damaged_tiffs

    with pytest.raises(UnprocessableDocument) as caught:
        load_pages(damaged_tiffs()[name], "image/tiff", None, LIMITS)
    assert caught.value.code == "corrupt_image"


def test_documents_import_no_ray():
    """The decoder processes run this module; importing Ray there would cost a second and 100 MB each."""
    import subprocess
    import sys

    probe = "import sys, app.sandbox.documents, app.sandbox.worker; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.parametrize("numbers, spec", [([1, 2, 3, 7], "1-3,7"), ([5], "5"), ([2, 4, 5, 6, 9, 10], "2,4-6,9-10")])
def test_the_job_runner_writes_page_specs_the_parser_reads_back(numbers, spec):
    from app.jobs.rendering import page_spec

    assert page_spec(numbers) == spec
    assert parse_page_spec(page_spec(numbers), 12, max_pages=12) == [n - 1 for n in numbers]


def test_fit_to_budget_never_rounds_a_page_past_the_budget():
    """Rounding both sides up can overshoot max_pixels (the sandbox then refuses the page as a
    decoder fault: a devset receipt at Qwen's 1,003,520 pixels came out 60 pixels over)."""
    target = InputBudget(max_side=2048, max_pixels=1280 * 28 * 28)
    over = []
    for width in range(1000, 1400, 7):
        for height in range(1400, 2200, 11):
            fitted = target.fitted_size(width, height, target.scale(width, height))
            if fitted[0] * fitted[1] > target.max_pixels or max(fitted) > target.max_side:
                over.append((width, height, fitted))
            assert abs(fitted[0] / fitted[1] - width / height) < 0.01  # the page keeps its shape
    assert over == []
    resized, _ = fit_to_budget(Image.new("RGB", (1080, 2244)), 2048, 1280 * 28 * 28)
    assert resized.width * resized.height <= 1280 * 28 * 28
