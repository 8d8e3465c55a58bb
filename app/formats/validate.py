"""The shipped ALTO schema, loaded without a network (xmlschema; a test and tooling dependency)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

SCHEMAS = Path(__file__).parent / "schemas"


@lru_cache(maxsize=1)
def alto_schema():
    import xmlschema

    return xmlschema.XMLSchema(SCHEMAS / "alto-4-4.xsd",
                               locations=[("http://www.w3.org/1999/xlink", str(SCHEMAS / "xlink.xsd"))],
                               allow="local")
