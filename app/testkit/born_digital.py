"""Born-digital PDFs with known text (reportlab, a test dependency): a title, two columns of running text
and a table on every page, in a real font (DejaVu where Debian's fonts-dejavu is installed, else
Helvetica). Also the three pages that must be OCR'd all the same: a scan with an invisible OCR layer,
a page whose layer is garbage (private-use glyphs), and a scan beside real text."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

_DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
WORDS = ("contract", "invoice", "statement", "register", "archive", "ledger", "payment", "account", "balance",
         "period", "customer", "office", "total", "report", "annual", "section", "amount", "number")
TABLE = [["Item", "Quantity", "Price"], ["Paper", "12", "3.40"], ["Toner", "2", "61.00"], ["Folders", "30", "0.95"]]


def _font(canvas) -> str:
    if _DEJAVU.is_file():
        from reportlab.pdfbase import pdfmetrics
        from reportlab.pdfbase.ttfonts import TTFont

        if "DejaVu" not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(TTFont("DejaVu", str(_DEJAVU)))
        return "DejaVu"
    return "Helvetica"


def column_lines(page: int, column: int, count: int = 12) -> list[str]:
    """The known running text of one column: five or six words a line from a fixed rotation, each line
    made unique by its place (page, column, row), so that order can be checked line by line."""
    lines = []
    for row in range(count):
        start = (page * 31 + column * 17 + row * 5) % len(WORDS)
        words = [WORDS[(start + k * 7) % len(WORDS)] for k in range(4 if row % 4 else 3)]
        lines.append(" ".join(words) + f" {page + 1}.{column + 1}.{row + 1} " + WORDS[(start + 3) % len(WORDS)])
    return lines


def born_digital_pdf(pages: int = 3) -> tuple[bytes, list[dict]]:
    """The PDF, and per page its title, columns' lines and table rows (what must be read exactly)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas as pdf_canvas

    buffer = io.BytesIO()
    canvas = pdf_canvas.Canvas(buffer, pagesize=A4)
    font = _font(canvas)
    width, height = A4
    truth = []
    for page in range(pages):
        title = f"Annual statement {2020 + page}"
        canvas.setFont(font, 20)
        canvas.drawString(60, height - 80, title)
        columns = [column_lines(page, c) for c in (0, 1)]
        canvas.setFont(font, 9)
        for c, lines in enumerate(columns):
            for row, line in enumerate(lines):
                canvas.drawString(60 + c * 260, height - 130 - row * 16, line)
        top = height - 380
        for r, row in enumerate(TABLE):
            for c, cell in enumerate(row):
                canvas.drawString(80 + c * 140, top - r * 22, cell)
            canvas.line(70, top - r * 22 - 6, 500, top - r * 22 - 6)
        canvas.drawString(60, 40, f"Page {page + 1}")
        canvas.showPage()
        truth.append({"title": title, "columns": columns, "table": TABLE, "footer": f"Page {page + 1}"})
    canvas.save()
    return buffer.getvalue(), truth


def scanned_with_invisible_layer(image: Image.Image, hidden_text: str) -> bytes:
    """A scan (the image, full page) under an earlier OCR's invisible text (render mode 3)."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas as pdf_canvas

    buffer = io.BytesIO()
    size = (image.width * 72 / 150, image.height * 72 / 150)
    canvas = pdf_canvas.Canvas(buffer, pagesize=size)
    canvas.drawImage(ImageReader(image), 0, 0, *size)
    text = canvas.beginText(20, size[1] - 40)
    text.setTextRenderMode(3)
    text.setFont("Helvetica", 12)
    text.textLine(hidden_text)
    canvas.drawText(text)
    canvas.showPage()
    canvas.save()
    return buffer.getvalue()


def garbage_layer_pdf(image: Image.Image) -> bytes:
    """A page that draws its text as an image, with a visible layer of private-use glyphs on top (a font
    without a Unicode map reads like this)."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas as pdf_canvas

    buffer = io.BytesIO()
    size = (image.width * 72 / 150, image.height * 72 / 150)
    canvas = pdf_canvas.Canvas(buffer, pagesize=size)
    canvas.drawImage(ImageReader(image), 0, 0, *size)
    canvas.setFont(_font(canvas), 10)
    canvas.setFillColorRGB(1, 1, 1)
    canvas.drawString(20, 20, "".join(chr(0xE000 + i) for i in range(40)))
    canvas.showPage()
    canvas.save()
    return buffer.getvalue()


def mixed_page_pdf(image: Image.Image, caption: str) -> bytes:
    """Real text (a caption) beside a large picture of text: the picture holds text the layer lacks."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas as pdf_canvas

    buffer = io.BytesIO()
    canvas = pdf_canvas.Canvas(buffer, pagesize=A4)
    canvas.setFont(_font(canvas), 12)
    canvas.drawString(60, A4[1] - 60, caption)
    scale = min(470 / image.width, 600 / image.height)
    canvas.drawImage(ImageReader(image), 60, A4[1] - 100 - image.height * scale, image.width * scale,
                     image.height * scale)
    canvas.showPage()
    canvas.save()
    return buffer.getvalue()
