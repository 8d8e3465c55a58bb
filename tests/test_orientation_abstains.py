"""A page is turned only where its own lines back the turn: upright pages whose text runs several
ways stay upright and say so; a turned page of the same kind is still turned (issue 29)."""

from __future__ import annotations

import numpy as np
import pytest

from app.orientation.confirm import Votes, verdict
from app.orientation.finder import MIN_SHARE
from app.orientation.geometry import turn
from app.orientation.upright import Orienter
from app.testkit.upright_pages import form, product_box

# Seeds of product boxes that the looks alone turn (the finder before the check: 36, 38 and 49 to
# 270, 180 and 180), and ones they leave upright; load/orientation_upright.py measures 26 of them.
TURNED_BY_THE_LOOKS = (36, 38, 49)


@pytest.fixture(scope="module")
def orienter():
    return Orienter("auto", MIN_SHARE)


def read(orienter, image, mode=None):
    return orienter.upright(np.asarray(image), mode)[1]


@pytest.mark.parametrize("seed", TURNED_BY_THE_LOOKS)
def test_an_upright_page_with_text_several_ways_stays_upright_and_says_so(orienter, seed):
    turned = read(orienter, product_box(seed))
    assert turned.rotation == 0
    assert turned.look == "mixed" and turned.proposed != 0, turned  # the looks alone would have turned it
    assert "several ways" in turned.note


@pytest.mark.parametrize("angle", (90, 180, 270))
def test_the_same_page_uploaded_turned_is_still_turned_upright(orienter, angle):
    page = np.asarray(form(29))
    turned = read(orienter, turn(page, (360 - angle) % 360))
    assert (turned.rotation, turned.note) == (angle, None)
    assert turned.confidence >= MIN_SHARE


def test_a_higher_bar_leaves_a_turned_page_as_uploaded_with_a_note():
    strict = Orienter("auto", 1.0)
    page = turn(np.asarray(product_box(40)), 90)  # mostly across once upright; its labels vote otherwise
    turned = read(strict, page)
    assert turned.rotation == 0 and turned.note is not None


def test_the_verdict_weighs_the_lines_against_the_bar():
    backed = Votes({90: 0.8, 0: 0.2}, lines=5)
    assert verdict(backed, 90, 0.3, MIN_SHARE) == "turn"
    assert verdict(Votes({90: 0.6, 0: 0.4}, lines=5), 90, 0.99, MIN_SHARE) == "mixed"
    assert verdict(Votes({90: 0.7, 270: 0.3}, lines=5), 90, 0.99, MIN_SHARE) == "unsure"
    # no line long enough to vote: the finder's own confidence must clear the bar
    assert verdict(Votes({}, lines=0), 90, 0.9, MIN_SHARE) == "turn"
    assert verdict(Votes({}, lines=0), 90, 0.6, MIN_SHARE) == "unsure"


def test_over_http_a_page_with_text_several_ways_is_read_upright_and_the_response_says_why(client):
    from app.synthetic import png_bytes

    response = client.post("/v1/ocr", files={"file": ("box.png", png_bytes(product_box(38)), "image/png")})
    assert response.status_code == 200, response.text
    [page] = response.json()["pages"]
    assert page["rotation"] == 0
    assert any("several ways" in note for note in page["notes"]), page["notes"]
    assert page["rotation_confidence"] < MIN_SHARE  # the lines' share behind reading it upright
