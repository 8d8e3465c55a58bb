"""Orientation: which way up a page is, turning it upright, and mapping boxes back to the upload.

- geometry.py: quarter turns of pixels and of points (pure, exact);
- finder.py: the rotation of a page, a cheap first look then a full one where unsure;
- models.py: the bundled PP-OCR models the finder uses.
"""
