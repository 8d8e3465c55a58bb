"""Finding a page's rotation among 0/90/180/270, cheaply where the page is upright.

The first look, on every page (tens of milliseconds):
1. The axis of the text, from a thumbnail's ink: each blob of ink (a character, or part of
   one) and its two nearest neighbours. Within a line characters sit closer to each other
   than lines do, so neighbours lie along the lines. A strip (a line or two cut out, low and
   wide or tall and narrow) runs along its length. Where the blobs are unclear (Fraktur letters
   in pieces, receipts of sparse capitals), the gaps between lines: bands of ink, long for
   their height, between rows without.
2. Where the axis is clear, the page is turned so that the lines run across, and crops of six
   lines go to the bundled 0/180 classifier, each asked both ways up (its own lean towards one
   answer cancels out). Pooled, the lines settle it when they are surely one way up (on the
   devset, no upright page's lines came within 0.3 of the bar for upside down, nor the reverse).
   The first three lines are asked first; where they are very sure (pooled within 0.1 of an
   answer: most upright pages) the other three are not asked. On load/orientation_upright.py's sets
   every page that three lines settled so, six settled the same way, or the reader did.

Where the classifier is unsure (Fraktur, some receipts), a closer look at the same crops:
3. The engine's recognizer reads two of them, of the page's usual line height, both ways up; the
   way they read more confidently is up, or, if the two ways are close, two more lines are read
   and pooled. A crop that reads as nothing either way (a rule, an ornament) has no vote.

Where the axis is still unclear (mixed layouts, a word or two on a page), or fewer than two of the
crops read as text, the full look:
4. The detector's line boxes on a thumbnail give the axis: boxes longer across than down, by area.
5. The longest lines, turned along that axis, are read both ways up as in 3. No single line decides.

`Finding.confidence` is the share of the evidence for the angle chosen, in [0, 1]: the axis
vote's share times the up/down vote's share.

A turn found this way is made only once the page's own lines back it (confirm.py): on a page whose
text runs several ways, the looks above can follow a minority. Where they do not back it, the page
is read as uploaded and `look` says why: "mixed" or "unsure".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from app.orientation.axis import axis_from_blobs, axis_from_boxes, axis_from_gaps, ink_mask, strip_axis, thumbnail, to_grey
from app.orientation.confirm import line_votes, verdict
from app.orientation.crops import both_ways_up, box_crops, line_crops, strip_crops, usual_height_first
from app.orientation.geometry import turn, turn_point
from app.page_size import as_rgb

LOOK_SIDE = 1024  # the thumbnail the ink is measured on
AXIS_SURE = 0.65  # share of neighbour pairs along one axis that settles the axis in the first look
FIRST_LINES = 6  # lines the first look classifies
CLASSIFIER_SURE = 0.20  # the lines' pooled P(upside down) must be below this, or above 1 minus it
EARLY_LINES = 3  # the classifier asks this many lines first; the rest only where these are not very sure
EARLY_SURE = 0.10  # ...very sure: the first lines' pooled P(upside down) below this, or above 1 minus it
READ_LINES = 2  # lines the recognizer reads both ways up, then as many again if the ways are close
READ_MARGIN = 0.15  # mean scores at least this far apart settle it without more lines
READ_FLOOR = 0.3  # a line read below this both ways up is no text (a rule, a picture): it has no vote


@dataclass(frozen=True)
class Finding:
    rotation: int  # clockwise degrees that make the page upright
    confidence: float
    look: str  # "first": the classifier settled it; "read": the recognizer did; "full"; "blank": no text, left as is;
    # "mixed" / "unsure": a turn was found but the page's lines did not back it, so it was read as uploaded
    proposed: int = 0  # the turn the looks found, where the lines did not back it


MIN_SHARE = 0.75  # default share of the lines' weight that must back a turn (settings: orientation_min_share)


class OrientationFinder:
    """Finds rotations; holds the models. Thread-safe: one page per call."""

    def __init__(self, direction=None, reader=None, min_share: float = MIN_SHARE):
        from app.orientation.models import LineDirection, LineReader

        self._direction = direction or LineDirection()
        self._reader = reader or LineReader()
        self.min_share = min_share

    def find(self, page: np.ndarray) -> Finding:
        """`page`: HxW grey or HxWx3 RGB uint8. A turn is returned only where the page's lines back it."""
        finding = self._look(page)
        if finding.rotation == 0:
            return finding
        votes = line_votes(page, self._reader.boxes(as_rgb(page)), self._reader)
        judged = verdict(votes, finding.rotation, finding.confidence, self.min_share)
        if judged == "turn":
            backing = votes.share(finding.rotation) if votes.lines else finding.confidence
            return Finding(finding.rotation, round(backing, 3), finding.look)
        return Finding(0, round(votes.share(0), 3), judged, proposed=finding.rotation)

    def _look(self, page: np.ndarray) -> Finding:
        """The looks, without the check. Only the crops the models read become RGB."""
        thumb, thumb_scale = thumbnail(to_grey(page), LOOK_SIDE)
        ink = ink_mask(thumb)
        strip = strip_axis(page)
        if strip is not None:
            across, axis_share = strip, 1.0
        else:
            across, axis_share = axis_from_blobs(ink)
            if across is None or axis_share < AXIS_SURE:
                across, axis_share = axis_from_gaps(ink, across, axis_share)
        if across is not None and axis_share >= AXIS_SURE:
            base = 0 if across else 90
            crops = line_crops(turn(page, base), turn(ink, base), thumb_scale, FIRST_LINES)
            if strip is not None and len(crops) < 2:
                crops = strip_crops(turn(page, base), FIRST_LINES)
            if len(crops) >= 2:  # one line is not a vote
                settled = self._up_or_down(crops)
                if settled is not None:
                    flipped, share, look = settled
                    return Finding((base + 180 * flipped) % 360, round(axis_share * share, 3), look)
        return self._full_look(page, across, axis_share)

    def _up_or_down(self, crops: list[np.ndarray]) -> Optional[tuple[bool, float, str]]:
        """(upside down?, the vote's share, which look settled it) for crops of lines lying across;
        None where neither the classifier nor the recognizer could tell."""
        votes = self._classified(crops[:EARLY_LINES])
        upside_down = float(np.mean(votes))
        if len(crops) > EARLY_LINES and EARLY_SURE < upside_down < 1 - EARLY_SURE:
            votes = np.concatenate([votes, self._classified(crops[EARLY_LINES:])])
            upside_down = float(np.mean(votes))
        if upside_down <= CLASSIFIER_SURE or upside_down >= 1 - CLASSIFIER_SURE:
            return upside_down > 0.5, max(upside_down, 1 - upside_down), "first"
        read = self._read_both_ways(crops)
        return None if read is None else (*read, "read")

    def _classified(self, crops: list[np.ndarray]) -> np.ndarray:
        """Each crop's P(upside down), asked both ways up so that the classifier's own lean cancels out.
        The classifier's time is most of the first look (about 1.6 ms a crop on one core): most upright
        pages are settled by their first EARLY_LINES lines, at half the cost of all FIRST_LINES."""
        both = self._direction.upside_down(both_ways_up(crops))
        return (both[:len(crops)] + 1.0 - both[len(crops):]) / 2

    def _read_both_ways(self, crops: list[np.ndarray]) -> Optional[tuple[bool, float]]:
        """(upside down?, share) from the recognizer's confidence in each line, read both ways up:
        lines of the page's usual height first (the tallest bands are often headings, drop caps or
        rules), two at a time, until two lines that read as text either way come out at least
        READ_MARGIN apart, or four such lines are in. A line read below READ_FLOOR both ways is no
        text and has no vote. None with fewer than two lines of text: no single line decides."""
        scores = np.zeros((0, 2))
        ordered = usual_height_first(crops)
        for start in range(0, len(ordered), READ_LINES):
            batch = ordered[start:start + READ_LINES]
            read = self._reader.scores(both_ways_up(batch))
            pairs = np.column_stack([read[:len(batch)], read[len(batch):]])
            scores = np.vstack([scores, pairs[pairs.max(axis=1) >= READ_FLOOR]])
            if len(scores) >= READ_LINES:
                as_is, flipped = scores.mean(axis=0)
                if abs(as_is - flipped) >= READ_MARGIN or len(scores) >= 2 * READ_LINES:
                    break
        if len(scores) < 2:
            return None
        as_is, flipped = (float(value) for value in scores.mean(axis=0))
        return flipped > as_is, max(as_is, flipped) / (as_is + flipped)

    def _full_look(self, page: np.ndarray, blob_across: Optional[bool], blob_share: float) -> Finding:
        rgb = as_rgb(page)
        boxes = self._reader.boxes(rgb)
        across, axis_share = axis_from_boxes(boxes)
        if across is None:  # no line long enough to have an axis (a word or two): the blobs decide
            across, axis_share = blob_across, blob_share
        if across is None or not boxes:
            return Finding(0, 0.0, "blank")
        base = 0 if across else 90
        height, width = rgb.shape[:2]
        turned = turn(rgb, base)
        lines = [np.array([turn_point(x, y, base, width, height) for x, y in quad]) for quad in boxes]
        read = self._read_both_ways(box_crops(turned, lines, FIRST_LINES))
        if read is None:  # the axis, but no way up: the page as uploaded along it
            return Finding(base, round(axis_share * 0.5, 3), "full")
        flipped, share = read
        return Finding((base + 180 * flipped) % 360, round(axis_share * share, 3), "full")
