"""Pages that arrive turned: the geometry, the finder, and the service over real HTTP.

The rotated copies are made here from synthetic pages; no image is committed.
"""

from __future__ import annotations


import numpy as np
import pytest
from PIL import Image

from app.errors import BadRequest
from app.structure.layout import Box
from app.orientation.geometry import ANGLES, turn, turn_point, unturn_point
from app.orientation.finder import MIN_SHARE
from app.orientation.upright import Orienter, parse_mode
from app.pipeline.postprocess import uploaded_bbox
from app.schemas import PagePayload
from tests.conftest import png_bytes, render_text_page

LINES = ["INVOICE 4711", "Total amount 57.80 EUR", "Thank you"]


@pytest.fixture(scope="module")
def upright_page() -> np.ndarray:
    return np.asarray(render_text_page(LINES).convert("RGB"))


def turned_png(pixels: np.ndarray, clockwise: int) -> bytes:
    return png_bytes(Image.fromarray(turn(pixels, clockwise)))


# -- geometry: pixels and points agree, and undo each other --

@pytest.mark.parametrize("rotation", ANGLES)
def test_a_pixel_and_its_point_travel_together(rotation):
    height, width = 3, 5
    page = np.arange(height * width).reshape(height, width)
    turned = turn(page, rotation)
    for y in range(height):
        for x in range(width):
            # the pixel's centre, mapped, lands on the centre of the same value in the turned page
            tx, ty = turn_point(x + 0.5, y + 0.5, rotation, width, height)
            assert turned[int(ty), int(tx)] == page[y, x]
            assert unturn_point(tx, ty, rotation, width, height) == (x + 0.5, y + 0.5)


@pytest.mark.parametrize("rotation", ANGLES)
def test_a_box_on_the_upright_page_maps_back_to_the_upload(rotation):
    upload_w, upload_h = 300, 200  # the page as uploaded; upright it is 200 x 300 after a quarter turn
    page = PagePayload("r", 0, 1, None, 0, 0, upload_w, upload_h, 1.0, rotation=rotation)
    upright_box = Box(10, 20, 50, 30, "t", 1.0)
    expected = {0: [10, 20, 50, 30], 90: [20, 150, 30, 190], 180: [250, 170, 290, 180], 270: [270, 10, 280, 50]}
    assert uploaded_bbox(upright_box, page) == expected[rotation]


@pytest.mark.parametrize("value, mode", [(None, None), ("auto", "auto"), ("OFF", "off"), (" 270 ", "270")])
def test_orientation_modes_parse(value, mode):
    assert parse_mode(value) == mode


@pytest.mark.parametrize("value", ["45", "-90", "upright", "", "360"])
def test_other_orientations_are_refused(value):
    with pytest.raises(BadRequest):
        parse_mode(value)


# -- the finder, in process --

@pytest.fixture(scope="module")
def orienter() -> Orienter:
    return Orienter("auto", MIN_SHARE)


@pytest.mark.parametrize("uploaded_at", ANGLES)
def test_the_finder_turns_a_page_upright(orienter, upright_page, uploaded_at):
    pixels, done = orienter.upright(turn(upright_page, uploaded_at), None)
    assert done.rotation == (360 - uploaded_at) % 360
    assert np.array_equal(pixels, upright_page)
    assert 0 < done.confidence <= 1


@pytest.mark.parametrize("uploaded_at", ANGLES)
def test_a_strip_of_two_words_is_found_by_the_first_look(orienter, uploaded_at):
    """Two words cut out tight: too few blobs for an axis, and the gaps between its letters look
    like gaps between lines. Its shape says the line runs along it."""
    page = np.asarray(render_text_page(["Thank you"]).convert("RGB"))
    rows, columns = np.nonzero(page.min(axis=2) < 128)
    strip = page[rows.min() - 6:rows.max() + 7, columns.min() - 6:columns.max() + 7]
    assert strip.shape[0] * 3 <= strip.shape[1] <= 200  # a strip, as meant
    pixels, done = orienter.upright(turn(strip, uploaded_at), None)
    assert done.rotation == (360 - uploaded_at) % 360 and np.array_equal(pixels, strip)
    assert done.look == "first"  # settled by the classifier, without the detector or the recognizer


def speckled_lines(tops: range, seed: int = 1) -> np.ndarray:
    """An ink mask of lines 30 px high, each a row of letters (8-16 px wide, 4-8 px apart, placed
    afresh on every line as in prose) drawn as specks: Fraktur in pieces, sparse print."""
    rng = np.random.default_rng(seed)
    ink = np.zeros((600, 400), dtype=np.uint8)
    for top in tops:
        x = int(rng.integers(20, 40))
        while x < 360:
            width = int(rng.integers(8, 17))
            ink[top:top + 30, x:x + width] = rng.random((30, width)) < 0.4
            x += width + int(rng.integers(4, 9))
    return ink


def test_the_gaps_between_lines_give_the_axis_where_the_blobs_do_not():
    """Lines of ink specks: the specks' neighbours point every way, but the rows go from ink to gap
    once per line, and those bands are long for their height."""
    from app.orientation.axis import axis_from_gaps

    page = speckled_lines(range(40, 560, 80))  # seven lines
    assert axis_from_gaps(page, None, 0.0) == (True, 1.0)  # the bands down the page are not lines
    assert axis_from_gaps(page.T, True, 0.55) == (False, 1.0)  # turned: lines run down, whatever the blobs said
    one_line = speckled_lines(range(40, 41))
    # one line says nothing of gaps between lines, and its letters are no lines: the blobs' answer stands
    assert axis_from_gaps(one_line, False, 0.55) == (False, 0.55)
    assert axis_from_gaps(one_line.T, True, 0.55) == (True, 0.55)


class ScriptedReader:
    """The recognizer's confidence, scripted per line: a crop's corner pixel names its line, and
    after a half turn the name sits in the opposite corner."""

    def __init__(self, scores: dict[int, tuple[float, float]]):
        self._scores = scores  # line -> (as uploaded, turned 180)

    def scores(self, crops: list[np.ndarray]) -> np.ndarray:
        return np.array([self._scores[int(crop[0, 0, 0])][0] if crop[0, 0, 0] else self._scores[int(crop[-1, -1, 0])][1]
                         for crop in crops])


def named_crop(line: int, height: int) -> np.ndarray:
    crop = np.zeros((height, 4 * height, 3), dtype=np.uint8)
    crop[0, 0] = line
    return crop


def test_lines_that_read_as_nothing_have_no_vote_and_one_line_does_not_decide():
    """Two tall bands (a heading in an ornate face, a rule) read as next to nothing either way, a
    little better turned; the body lines read better upright. Pooled with the others, the bands
    would turn the page."""
    from app.orientation.finder import OrientationFinder

    crops = [named_crop(1, 100), named_crop(2, 90), named_crop(3, 50), named_crop(4, 50)]
    reader = ScriptedReader({1: (0.0, 0.28), 2: (0.05, 0.25), 3: (0.7, 0.55), 4: (0.7, 0.55)})
    finder = OrientationFinder(direction=object(), reader=reader)
    assert finder._read_both_ways(crops) == (False, pytest.approx(0.7 / 1.25))
    lone = ScriptedReader({1: (0.0, 0.28), 2: (0.05, 0.25), 3: (0.7, 0.55), 4: (0.1, 0.2)})
    assert OrientationFinder(direction=object(), reader=lone)._read_both_ways(crops) is None


class ScriptedDirection:
    """The classifier's P(upside down), scripted per line as ScriptedReader's scores are; it counts
    the crops it is asked."""

    def __init__(self, upside_down: dict[int, float]):
        self._upside_down, self.asked = upside_down, 0

    def upside_down(self, crops: list[np.ndarray]) -> np.ndarray:
        self.asked += len(crops)
        return np.array([self._upside_down[int(crop[0, 0, 0])] if crop[0, 0, 0] else 1 - self._upside_down[int(crop[-1, -1, 0])]
                         for crop in crops])


def test_the_classifier_asks_three_lines_first_and_the_other_three_only_where_they_are_not_very_sure():
    from app.orientation.finder import OrientationFinder

    crops = [named_crop(line, 20) for line in range(1, 7)]
    very_sure = ScriptedDirection({1: 0.05, 2: 0.0, 3: 0.1, 4: 0.9, 5: 0.9, 6: 0.9})
    finder = OrientationFinder(direction=very_sure, reader=object())
    assert finder._up_or_down(crops) == (False, pytest.approx(1 - 0.05), "first")
    assert very_sure.asked == 6  # three lines, each both ways up: the other three were not asked
    # The first three lean up, not very surely (0.15): the other three are asked and all six pooled.
    leaning = ScriptedDirection({1: 0.15, 2: 0.15, 3: 0.15, 4: 0.0, 5: 0.0, 6: 0.0})
    finder = OrientationFinder(direction=leaning, reader=object())
    assert finder._up_or_down(crops) == (False, pytest.approx(1 - 0.075), "first")
    assert leaning.asked == 12


def test_a_fixed_angle_is_applied_without_looking_and_off_leaves_the_page(orienter, upright_page):
    upside_down = turn(upright_page, 180)
    pixels, done = orienter.upright(upside_down, "180")
    assert (done.rotation, done.confidence) == (180, None) and np.array_equal(pixels, upright_page)
    pixels, done = orienter.upright(upside_down, "off")
    assert (done.rotation, done.confidence) == (0, None) and pixels is upside_down


def test_a_blank_page_is_left_as_it_is(orienter):
    blank = np.full((400, 300, 3), 255, dtype=np.uint8)
    pixels, done = orienter.upright(blank, None)
    assert done.rotation == 0 and pixels.shape == blank.shape


# -- the service, over HTTP --

def ocr(client, png: bytes, **params):
    response = client.post("/v1/ocr", params=params, files={"file": ("page.png", png, "image/png")})
    assert response.status_code == 200, response.text
    [page] = response.json()["pages"]
    return page


@pytest.fixture(scope="module")
def upright_result(client, upright_page) -> dict:
    return ocr(client, turned_png(upright_page, 0))


@pytest.mark.parametrize("uploaded_at", [90, 180, 270])
def test_a_turned_page_reads_as_upright_with_boxes_on_the_upload(client, upright_page, upright_result, uploaded_at):
    page = ocr(client, turned_png(upright_page, uploaded_at))
    assert upright_result["rotation"] == 0 and "invoice 4711" in upright_result["text"].lower()
    assert page["rotation"] == (360 - uploaded_at) % 360 and page["rotation_confidence"] > 0
    assert page["text"] == upright_result["text"]
    height, width = upright_page.shape[:2]
    assert (page["width"], page["height"]) == ((height, width) if uploaded_at in (90, 270) else (width, height))
    assert "orientation" in page["timings_ms"]
    # The engine saw the same pixels, so each box is the upright one carried onto the turned upload.
    for turned_block, block in zip(page["blocks"], upright_result["blocks"]):
        x0, y0, x1, y1 = block["bbox"]
        corners = [turn_point(x, y, uploaded_at, width, height) for x, y in ((x0, y0), (x1, y1))]
        expected = [min(c[0] for c in corners), min(c[1] for c in corners),
                    max(c[0] for c in corners), max(c[1] for c in corners)]
        assert turned_block["text"] == block["text"]
        assert turned_block["bbox"] == pytest.approx(expected, abs=0.11)


def test_the_request_can_fix_or_switch_off_the_turn(client, upright_page, upright_result):
    upside_down = turned_png(upright_page, 180)
    fixed = ocr(client, upside_down, orientation="180")
    assert (fixed["rotation"], fixed["rotation_confidence"]) == (180, None)
    assert fixed["text"] == upright_result["text"]
    left = ocr(client, upside_down, orientation="off")
    assert (left["rotation"], left["rotation_confidence"]) == (0, None)
    # Read as it came, upside down: each line still reads (the engine reads a doubtful line again
    # turned, app/engines/ppocr.py), but the page's lines come bottom first.
    lowered = left["text"].lower()
    assert lowered.index("thank you") < lowered.index("invoice 4711")
    assert upright_result["text"].lower().index("invoice 4711") < upright_result["text"].lower().index("thank you")
    form = client.post("/v1/ocr", params={"orientation": "off"}, data={"orientation": "180"},
                       files={"file": ("page.png", upside_down, "image/png")})
    assert form.json()["pages"][0]["rotation"] == 180  # the form field wins over the query


def test_a_bad_orientation_is_a_400(client, upright_page):
    response = client.post("/v1/ocr", params={"orientation": "45"},
                           files={"file": ("page.png", turned_png(upright_page, 0), "image/png")})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request" and "orientation" in response.json()["error"]["message"]
    assert response.json()["error"]["retryable"] is False


def test_a_job_keeps_the_requests_orientation(client, upright_page, upright_result):
    from app.testkit.jobs import wait_finished

    document = turned_png(upright_page, 180)
    accepted = client.post("/v1/jobs", params={"orientation": "off"}, files={"file": ("p.png", document, "image/png")})
    assert accepted.status_code == 202, accepted.text
    auto = client.post("/v1/jobs", files={"file": ("p.png", document, "image/png")}).json()
    for job_id in (accepted.json()["id"], auto["id"]):
        assert wait_finished(client, job_id)["status"] == "succeeded"
    off_page = client.get(f"/v1/jobs/{accepted.json()['id']}/result").json()["pages"][0]
    auto_page = client.get(f"/v1/jobs/{auto['id']}/result").json()["pages"][0]
    assert off_page["rotation"] == 0 and auto_page["rotation"] == 180
    assert auto_page["text"] == upright_result["text"] != off_page["text"]


# -- the CPU engine: one upside-down line in an upright page --

def test_ppocr_reads_a_single_upside_down_line_by_reading_doubtful_lines_both_ways(monkeypatch):
    from app.config import Settings
    from app.engines import build_engine
    from app.engines import ppocr

    engine = build_engine(Settings(), threads=1)
    engine.load()
    page = np.asarray(render_text_page(["INVOICE 4711", "Total amount 57.80 EUR", "Thank you for your order"])
                      .convert("RGB")).copy()
    page[100:156, 30:460] = page[100:156, 30:460][::-1, ::-1]  # the second line alone, turned 180 degrees

    def texts():
        return [line.text for line in engine.infer([page])[0].lines]

    assert texts() == ["INVOICE 4711", "Total amount 57.80 EUR", "Thank you for your order"]
    monkeypatch.setattr(ppocr, "REREAD_BELOW", 0.0)  # without the second reading, the line is garbage
    without = texts()
    assert "Total amount 57.80 EUR" not in without and without[0] == "INVOICE 4711"


def test_a_page_of_dots_costs_bounded_memory(orienter, monkeypatch):
    """A page of 40,000 dots is 40,000 blobs: the finder samples them rather than measure every pair
    (tens of megabytes a page in the Preprocessor replica, more as the dots get finer)."""
    import tracemalloc

    from app.orientation import axis

    dots = np.full((1020, 1020), 255, dtype=np.uint8)
    for y in range(0, 1020, 5):
        for x in range(0, 1020, 5):
            dots[y:y + 3, x:x + 3] = 0
    assert len(axis.ink_blobs(axis.ink_mask(dots))) > 6 * axis.MAX_BLOBS  # as hostile as meant

    def peak_bytes() -> int:
        tracemalloc.start()
        try:
            orienter.upright(dots, None)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak_bytes() < 40 * 2**20
    monkeypatch.setattr(axis, "MAX_BLOBS", 10**9)
    assert peak_bytes() > 80 * 2**20  # what the sample saves
