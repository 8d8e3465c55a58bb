"""Orientation: which way up a page is, turning it upright, and mapping boxes back to the upload.

- geometry.py: quarter turns of pixels and of points (pure, exact);
- finder.py: the rotation of a page, a cheap first look then a full one where unsure;
- axis.py: which way the lines run, from a thumbnail's ink (or the detector's boxes);
- crops.py: the line crops the models are asked about;
- models.py: the bundled PP-OCR models the finder uses.
"""
