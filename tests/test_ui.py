"""The page at /ui in a real browser: Debian's chromium through its chromedriver (Selenium), against the
session's Serve application over real HTTP. Nothing is downloaded: the browser and its driver are the
system's (.ci/run installs them), and the page loads nothing from outside (checked below).

With UI_SCREENSHOTS=<folder> set, the upload, progress and result views are saved there as PNGs
(docs/ui holds the ones the docs show: `UI_SCREENSHOTS=docs/ui .venv/bin/python -m pytest tests/test_ui.py`).
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from app.testkit.poppler import pdftotext
from app.synthetic import pdf_bytes, png_bytes, render_text_page

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SAMPLE_PAGE, SAMPLE_PDF = EXAMPLES / "sample-page.png", EXAMPLES / "sample.pdf"
EXPECTED = json.loads((EXAMPLES / "expected.json").read_text())
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MARKUP = "<img src=x onerror=alert(1)>"


def normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ui-downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    assert os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK), \
        "Debian's chromium and chromium-driver are needed (.ci/run installs them)"
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,1000",
                     "--disable-gpu", "--no-first-run", "--disable-background-networking"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager, which could try to download one, never runs.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(browser, base: str) -> None:
    browser.get(base + "/ui/")
    browser.execute_script("window.sessionStorage.clear()")
    browser.refresh()
    until(browser, "return window.ocrUi && window.ocrUi.ready")
    browser.get_log("browser")  # start each test with an empty console


def until(browser, script: str, timeout_s: float = 90):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout_s, poll_frequency=0.05).until(lambda driver: driver.execute_script(script))


def ui(browser, name: str):
    return browser.execute_script(f"return window.ocrUi.{name}")


def by_id(browser, element_id: str):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, element_id)


def choose(browser, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(by_id(browser, select_id)).select_by_value(value)


def screenshot(browser, name: str) -> None:
    folder = os.environ.get("UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(Path(folder) / f"ui-{name}.png"))


def console_errors(browser) -> list:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def downloaded(folder: Path, suffix: str, timeout_s: float = 60) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = [path for path in folder.iterdir() if path.name.endswith(suffix)]
        if done and not list(folder.glob("*.crdownload")):
            return done[0]
        time.sleep(0.1)
    raise AssertionError(f"no {suffix} in {sorted(p.name for p in folder.iterdir())}")


def ink_share(picture: Image.Image, bbox) -> float:
    """The share of dark pixels inside `bbox` (the page's pixels): text is ink, a box beside it is paper."""
    x0, y0, x1, y1 = (int(round(value)) for value in bbox)
    crop = np.asarray(picture.convert("L").crop((x0, y0, x1, y1)))
    return float((crop < 128).mean())


# -- the page itself --

class _Markup(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.handlers, self.outside = [], [], []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script":
            self.scripts.append(attributes.get("src"))
        self.handlers += [name for name in attributes if name.startswith("on")]
        for name in ("src", "href"):
            if re.match(r"^(https?:)?//", attributes.get(name) or ""):
                self.outside.append(attributes[name])


def test_the_page_is_static_files_with_a_strict_policy_and_nothing_from_outside(service_url, keyed_app, browser):
    tenants, _, _ = keyed_app
    with httpx.Client(timeout=30) as http:
        page = http.get(service_url + "/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        markup = _Markup()
        markup.feed(page.text)
        assert markup.scripts == ["ui.js"] and not markup.handlers and not markup.outside
        for name in ("ui.js", "ui.css"):
            asset = http.get(f"{service_url}/ui/{name}")
            assert asset.status_code == 200 and "content-security-policy" in asset.headers
            assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", asset.text)  # the SVG namespace is a name
        missing = http.get(service_url + "/ui/nothing-here.js")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        bare = http.get(service_url + "/ui", follow_redirects=False)
        assert bare.status_code in (301, 307) and bare.headers["location"].endswith("/ui/")
        # Keys on: the page loads without one (it asks for one); the API behind it does not answer without.
        assert http.get(tenants + "/ui/").status_code == 200
        assert http.get(tenants + "/ui", follow_redirects=True).url.path == "/tenants/ui/"
        assert http.post(tenants + "/v1/ocr", content=b"x").status_code == 401
    open_page(browser, service_url)
    origin = browser.execute_script("return window.location.origin")
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(name.startswith(origin) for name in loaded)
    assert ui(browser, "cspViolations") == 0 and not console_errors(browser)


# -- upload, the result on the page, keyboard --

def test_upload_sample_page_shows_its_text_and_boxes_and_works_by_keyboard(service_url, browser, downloads, client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(browser, service_url)
    by_id(browser, "file").send_keys(str(SAMPLE_PAGE))  # the file chooser's answer, as a keyboard user gives it
    until(browser, "return window.ocrUi.route === 'direct'")
    assert "/v1/ocr" in by_id(browser, "route-note").text
    screenshot(browser, "upload")
    by_id(browser, "opt-pages").send_keys(Keys.ENTER)  # Enter in the form submits it
    until(browser, "return window.ocrUi.state === 'result'")
    result = ui(browser, "result")
    page = result["pages"][0]
    reference = client.post("/v1/ocr", files={"file": ("sample-page.png", SAMPLE_PAGE.read_bytes(), "image/png")})
    assert [b["text"] for b in page["blocks"]] == [b["text"] for b in reference.json()["pages"][0]["blocks"]]

    lines = [normal(item.text.split("\n", 1)[-1]) for item in browser.find_elements(By.CSS_SELECTOR, "#lines li")]
    assert [re.sub(r"^\d+% ?", "", line) for line in lines] == [normal(text) for text in EXPECTED["sample-page.png"][0]]
    # One box per line, where the JSON says, on the page's own pixels: each line's box holds ink.
    rects = browser.find_elements(By.CSS_SELECTOR, "#page-svg rect.line")
    assert len(rects) == len(page["blocks"]) == 3
    picture = Image.open(SAMPLE_PAGE)
    for rect, block in zip(rects, page["blocks"]):
        drawn = [float(rect.get_attribute(name)) for name in ("x", "y", "width", "height")]
        x0, y0, x1, y1 = block["bbox"]
        assert drawn == pytest.approx([x0, y0, x1 - x0, y1 - y0])
        assert ink_share(picture, block["bbox"]) > 0.05
    svg = by_id(browser, "page-svg")
    assert browser.execute_script("return arguments[0].getAttribute('viewBox')", svg) == f"0 0 {page['width']} {page['height']}"
    assert (page["width"], page["height"]) == picture.size
    image = browser.find_element(By.CSS_SELECTOR, "#page-svg image")
    assert image.get_attribute("href").startswith("data:image/jpeg;base64,")
    assert browser.execute_script("return document.querySelector('#page-svg image').getBBox().width") > 0

    # Lines by keyboard: the list has focus; arrows move, and the box follows.
    active = browser.switch_to.active_element
    assert active.get_attribute("id") == "lines" and ui(browser, "line") == 0
    active.send_keys(Keys.ARROW_DOWN)
    assert ui(browser, "line") == 1
    picked = browser.find_elements(By.CSS_SELECTOR, "#page-svg rect.line.picked")
    assert [rect.get_attribute("data-line") for rect in picked] == ["1"]
    assert page["blocks"][1]["text"] in by_id(browser, "selected-line").text
    active.send_keys(Keys.END)
    assert ui(browser, "line") == 2
    # ... and the other way round: a box picked on the page selects its line.
    rects[0].click()
    assert ui(browser, "line") == 0
    assert browser.find_element(By.ID, "line-0").get_attribute("aria-selected") == "true"

    # A download by keyboard: Tab from the page chooser (past the page buttons, off on a one-page result)
    # to JSON, then Enter.
    by_id(browser, "page-select").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("data-format") == "json"
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    saved = json.loads(downloaded(downloads, "sample-page.json").read_text())
    assert saved["text"] == result["text"] and "image" not in saved["pages"][0]
    assert ui(browser, "cspViolations") == 0 and not console_errors(browser)


# -- a job: progress from its events, to its end; the searchable PDF --

def test_a_pdf_job_shows_its_pages_as_read_to_the_end_and_downloads_its_searchable_pdf(service_url, browser,
                                                                                        downloads, client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(browser, service_url)
    by_id(browser, "file").send_keys(str(SAMPLE_PDF))
    choose(browser, "opt-route", "job")
    until(browser, "return window.ocrUi.route === 'job'")
    assert "/v1/jobs" in by_id(browser, "route-note").text
    by_id(browser, "submit").send_keys(Keys.ENTER)
    until(browser, "return window.ocrUi.state !== 'upload'")
    job_id = ui(browser, "jobId")
    until(browser, "return window.ocrUi.state === 'result'")
    assert ui(browser, "events") == 3  # one page event each, from the stream
    events = [item.get_attribute("textContent") for item in browser.find_elements(By.CSS_SELECTOR, "#job-events li")]
    assert sorted(events) == [f"page {n}: done" for n in (1, 2, 3)]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    texts = [normal(page["text"]) for page in ui(browser, "result")["pages"]]
    assert texts == [normal(" ".join(lines)) for lines in EXPECTED["sample.pdf"]]
    by_id(browser, "page-next").click()
    assert ui(browser, "page") == 1 and "two of three" in by_id(browser, "lines").text.lower()
    assert "blank page" in by_id(browser, "page-caption").text  # a job keeps no pictures, and says so

    pdf_button = browser.find_element(By.CSS_SELECTOR, "#downloads button[data-format=pdf]")
    pdf_button.send_keys(Keys.ENTER)
    searchable = downloaded(downloads, "sample.pdf").read_bytes()
    assert searchable.startswith(b"%PDF")
    read_back = normal(pdftotext(searchable, raw=True))  # poppler, the reference reader
    for lines in EXPECTED["sample.pdf"]:
        for line in lines:
            assert normal(line) in read_back
    assert ui(browser, "downloads")[-1]["format"] == "pdf"


def test_cancel_ends_a_running_job_and_deletes_it(service_url, browser, client, tmp_path):
    open_page(browser, service_url)
    path = tmp_path / "thirty-pages.pdf"
    path.write_bytes(pdf_bytes(render_text_page([f"Page {n} of thirty", "cancel me"]) for n in range(1, 31)))
    try:
        by_id(browser, "file").send_keys(str(path))
        until(browser, "return window.ocrUi.route === 'job'")  # 30 pages: a job by size, unasked
        by_id(browser, "submit").click()
        until(browser, "return window.ocrUi.state === 'progress' && window.ocrUi.events >= 2")
        job_id = ui(browser, "jobId")
        screenshot(browser, "progress")
        by_id(browser, "cancel").click()
        until(browser, "return window.ocrUi.state === 'upload' && window.ocrUi.lastError !== null")
        assert ui(browser, "lastError")["code"] == "canceled"
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    finally:
        path.unlink()


# -- keys --

def test_without_a_key_the_page_shows_the_apis_401_and_with_one_the_result(keyed_app, browser):
    from selenium.webdriver.common.keys import Keys

    tenants, keys, _ = keyed_app
    refused = httpx.post(tenants + "/v1/ocr", files={"file": ("a.png", SAMPLE_PAGE.read_bytes(), "image/png")})
    assert refused.status_code == 401
    open_page(browser, tenants)
    by_id(browser, "file").send_keys(str(SAMPLE_PAGE))
    choose(browser, "opt-structure", "auto")
    by_id(browser, "submit").click()
    until(browser, "return window.ocrUi.lastError !== null")
    error = ui(browser, "lastError")
    assert (error["status"], error["code"]) == (401, "unauthorized")
    assert by_id(browser, "error-message").text == refused.json()["error"]["message"]
    assert browser.switch_to.active_element.get_attribute("id") == "api-key"

    browser.switch_to.active_element.send_keys(keys["tests"], Keys.ENTER)
    assert browser.execute_script("return window.sessionStorage.getItem('ocr-ui-api-key')") == keys["tests"]
    by_id(browser, "submit").click()
    until(browser, "return window.ocrUi.state === 'result'")
    page = ui(browser, "result")["pages"][0]
    assert [normal(block["text"]) for block in page["blocks"]] == [normal(t) for t in EXPECTED["sample-page.png"][0]]
    assert page["regions"] and by_id(browser, "markdown-panel").get_attribute("innerHTML")
    # The key lives in the tab only: not in the address, not in a cookie.
    assert keys["tests"] not in browser.current_url and browser.get_cookies() == []


# -- regions and a table's grid, on the page and as Markdown --

def test_a_table_is_drawn_as_its_cells_and_rendered_as_a_table(keyed_app, browser, tmp_path):
    from selenium.webdriver.common.by import By

    from app.testkit.born_digital import TABLE, born_digital_pdf

    tenants, keys, _ = keyed_app
    path = tmp_path / "statement.pdf"
    path.write_bytes(born_digital_pdf(1)[0])
    open_page(browser, tenants)
    by_id(browser, "api-key").send_keys(keys["tests"])
    by_id(browser, "key-save").click()
    assert by_id(browser, "key-state").text == "key set for this tab"
    by_id(browser, "file").send_keys(str(path))
    choose(browser, "opt-structure", "auto")
    by_id(browser, "submit").click()
    until(browser, "return window.ocrUi.state === 'result'")
    page = ui(browser, "result")["pages"][0]
    assert page["tables"] and page["image"]  # a page read from its own text still has its picture
    table = page["tables"][0]
    cells = browser.find_elements(By.CSS_SELECTOR, "#page-svg rect.cell")
    assert len(cells) == sum(1 for cell in table["cells"] if cell["bbox"]) >= 12
    regions = browser.find_elements(By.CSS_SELECTOR, "#page-svg rect.region")
    assert sorted(r.get_attribute("class").split()[1] for r in regions) == sorted(
        region["type"] for region in page["regions"] if region["bbox"])
    by_id(browser, "tab-markdown").click()
    rendered = [[cell.text for cell in row.find_elements(By.CSS_SELECTOR, "th, td")]
                for row in browser.find_elements(By.CSS_SELECTOR, "#markdown-panel table tr")]
    assert rendered == TABLE  # the table's cells, as rows and columns
    assert by_id(browser, "markdown-panel").find_element(By.CSS_SELECTOR, "h3").text == "Annual statement 2020"
    by_id(browser, "show-words").click()
    screenshot(browser, "result")


# -- a document's text is text --

def markup_pdf() -> bytes:
    """A born-digital page whose text layer reads MARKUP (read from the layer: exactly that text)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    document = canvas.Canvas(out, pagesize=A4)
    document.setFont("Helvetica", 20)
    document.drawString(72, 760, MARKUP)
    document.drawString(72, 720, "<script>window.ocrUiPwned = true</script>")
    document.save()
    return out.getvalue()


def test_a_documents_markup_is_shown_as_text_and_never_runs(service_url, browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    path = tmp_path / "markup.pdf"
    path.write_bytes(markup_pdf())
    open_page(browser, service_url)
    browser.execute_script("window.ocrUiPwned = false; window.alert = () => { window.ocrUiPwned = true; };")
    by_id(browser, "file").send_keys(str(path))
    choose(browser, "opt-pdf-text", "layer")
    by_id(browser, "submit").click()
    until(browser, "return window.ocrUi.state === 'result'")
    texts = [block["text"] for block in ui(browser, "result")["pages"][0]["blocks"]]
    assert MARKUP in texts
    assert MARKUP in by_id(browser, "lines").text  # shown, as text
    by_id(browser, "tab-markdown").click()
    assert MARKUP in by_id(browser, "markdown-panel").text
    by_id(browser, "tab-source").click()
    assert MARKUP in by_id(browser, "markdown-source").text
    assert browser.find_elements(By.CSS_SELECTOR, "img[src=x], main script") == []
    assert browser.execute_script("return window.ocrUiPwned") is False
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert ui(browser, "cspViolations") == 0 and not console_errors(browser)


# -- the one server option the page adds: page_images --

def test_page_images_are_the_page_as_uploaded_and_only_when_asked(client):
    upright = render_text_page(["A page turned on its side", "to check the picture"], width=900)
    turned = upright.rotate(-90, expand=True)  # a quarter turn clockwise: the service turns it back
    answer = client.post("/v1/ocr?page_images=true&orientation=auto",
                         files={"file": ("side.png", png_bytes(turned), "image/png")})
    assert answer.status_code == 200, answer.text
    page = answer.json()["pages"][0]
    assert page["rotation"] == 270 and (page["width"], page["height"]) == turned.size
    picture = page["image"]
    assert picture["data_url"].startswith("data:image/jpeg;base64,")
    shown = Image.open(io.BytesIO(base64.b64decode(picture["data_url"].split(",", 1)[1]))).convert("L")
    assert (shown.width, shown.height) == (picture["width"], picture["height"])
    assert shown.width / shown.height == pytest.approx(turned.width / turned.height, rel=0.02)
    # The picture is the page as uploaded, not as read: it matches the upload and not the upright page.
    expected = np.asarray(turned.convert("L").resize(shown.size), dtype=float)
    other = np.asarray(upright.convert("L").resize(shown.size), dtype=float)
    got = np.asarray(shown, dtype=float)
    assert np.abs(got - expected).mean() < 0.5 * np.abs(got - other).mean()
    assert np.abs(got - expected).mean() < 12

    plain = client.post("/v1/ocr", files={"file": ("side.png", png_bytes(turned), "image/png")})
    assert "image" not in plain.json()["pages"][0]
    bad = client.post("/v1/ocr?page_images=maybe", files={"file": ("side.png", png_bytes(turned), "image/png")})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_page_images"
