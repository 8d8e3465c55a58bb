"""A document's Markdown: each page's, a failed page (of a partial job) marked by a comment."""

from __future__ import annotations


def document_markdown(body: dict) -> str:
    parts = []
    for page in body["pages"]:
        if "error" in page and "markdown" not in page:
            parts.append(f"<!-- page {page['page_number']} failed: {page['error']['code']} -->")
        else:
            parts.append(page.get("markdown") or page.get("text") or "")
    return "\n\n".join(parts).strip() + "\n"
