"""What a searchable PDF we write may not carry over from a stranger's PDF: anything that acts.

A client's PDF may open with JavaScript (/OpenAction), run actions on page or field events (/AA),
launch programs, submit forms, or carry files (/EmbeddedFiles, file attachments). Our output goes
back to people who trust it as "the scan, with text", so all of that is removed: every dictionary of
the document is walked (indirect objects, and the direct ones inside them), and what acts is dropped.
Links inside the document (/GoTo) and plain web links (/URI) stay: they act only when clicked, as in
the original. The pages' appearance is untouched.
"""

from __future__ import annotations

import pikepdf

# Action types that run something, reach outside the document, or change it.
ACTIVE_ACTIONS = {"/JavaScript", "/Launch", "/SubmitForm", "/ImportData", "/ResetForm", "/GoToE", "/GoToR",
                  "/RichMediaExecute", "/Rendition", "/Sound", "/Movie", "/Hide", "/SetOCGState", "/Trans",
                  "/GoTo3DView"}
ALWAYS_DROPPED = ("/AA", "/JS", "/EF", "/RichMediaContent", "/XFA")  # event actions, scripts, embedded files
ACTIVE_ANNOTATIONS = {"/FileAttachment", "/RichMedia", "/Screen", "/Movie", "/Sound", "/3D"}


def strip_active_content(pdf: pikepdf.Pdf) -> int:
    """Remove what acts from the whole document; the number of entries removed."""
    removed = 0
    root = pdf.Root
    for key in ("/OpenAction", "/AA"):
        if key in root:
            del root[key]
            removed += 1
    names = root.get("/Names")
    if isinstance(names, pikepdf.Dictionary):
        for key in ("/JavaScript", "/EmbeddedFiles"):
            if key in names:
                del names[key]
                removed += 1
    for page in pdf.pages:
        removed += _drop_active_annotations(page)
    for obj in pdf.objects:
        removed += _clean(obj, depth=0)
    return removed


def _drop_active_annotations(page: pikepdf.Page) -> int:
    annotations = page.obj.get("/Annots")
    if not isinstance(annotations, pikepdf.Array):
        return 0
    kept = [a for a in annotations if not (isinstance(a, pikepdf.Dictionary) and a.get("/Subtype") in ACTIVE_ANNOTATIONS)]
    if len(kept) == len(annotations):
        return 0
    page.obj.Annots = pikepdf.Array(kept)
    return len(annotations) - len(kept)


def _clean(obj, depth: int) -> int:
    """One dictionary or array and the direct objects inside it (indirect ones are walked on their own)."""
    if depth > 32:
        return 0  # direct nesting this deep is no real PDF's; what is deeper is not an action we can reach
    removed = 0
    if isinstance(obj, (pikepdf.Dictionary, pikepdf.Stream)):
        for key in list(obj.keys()):
            value = obj.get(key)
            if key in ALWAYS_DROPPED or (key in ("/A", "/Next", "/PA") and _acts(value)):
                del obj[key]
                removed += 1
            elif isinstance(value, (pikepdf.Dictionary, pikepdf.Array)) and not value.is_indirect:
                removed += _clean(value, depth + 1)
        if obj.get("/S") in ACTIVE_ACTIONS:  # an action object of its own: made a no-op in place
            for key in list(obj.keys()):
                if key not in ("/Type",):
                    del obj[key]
            obj["/S"] = pikepdf.Name("/GoTo")
            obj["/D"] = pikepdf.Array([])
            removed += 1
    elif isinstance(obj, pikepdf.Array):
        for value in obj:
            if isinstance(value, (pikepdf.Dictionary, pikepdf.Array)) and not value.is_indirect:
                removed += _clean(value, depth + 1)
    return removed


def _acts(value) -> bool:
    if isinstance(value, pikepdf.Array):
        return any(_acts(item) for item in value)
    return isinstance(value, pikepdf.Dictionary) and value.get("/S") in ACTIVE_ACTIONS
