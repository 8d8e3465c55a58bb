"""The configuration reference, generated from the `Field` descriptions in app/config.py.

    python -m app.tools.config_reference            # print the Markdown table
    python -m app.tools.config_reference --write    # rewrite its block in docs/configuration.md

tests/test_config_reference.py keeps docs/configuration.md in step with the code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from app.config import BatchConfig, PreprocessConfig, Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
BLOCK = re.compile(r"(<!-- generated: python -m app.tools.config_reference -->\n)(?P<body>.*?)(<!-- end generated -->)",
                   re.S)


def _nested_model(annotation) -> type | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def rows(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted key, default, description) for every setting, nested models' settings after their own row."""
    for name, field in model.model_fields.items():
        key = prefix + name
        nested = _nested_model(field.annotation)
        if nested is not None and name != "engine_options":
            if field.description:
                yield key, "", field.description
            yield from rows(nested, key + ".")
            continue
        default = field.get_default(call_default_factory=True)
        yield key, json.dumps(default), field.description or ""


def table() -> str:
    lines = ["| key | default | what it does |", "|---|---|---|"]
    for key, default, description in rows(Settings):
        lines.append(f"| `{key}` | {f'`{default}`' if default else ''} | {description.replace('|', '/')} |")
    lines += ["", "The OCRModel deployment's `user_config` (live, through `reconfigure()`; `batching` above is its "
              "initial value):", "", "| key | default | what it does |", "|---|---|---|"]
    for key, default, description in rows(BatchConfig):
        lines.append(f"| `{key}` | `{default}` | {description.replace('|', '/')} |")
    lines += ["", "The Preprocessor deployment's `user_config` (live, through `reconfigure()`; it starts from "
              "`limits`, `orientation` and `decode_workers` above, and serve_config.yaml sets it on the deployment, "
              "so that a change reconfigures the Preprocessor replicas alone):", "",
              "| key | default | what it does |", "|---|---|---|"]
    for key, default, description in rows(PreprocessConfig):
        lines.append(f"| `{key}` | {f'`{default}`' if default else ''} | {description.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"rewrite the generated block of {DOC}")
    options = parser.parse_args(argv)
    if not options.write:
        sys.stdout.write(table())
        return 0
    text = DOC.read_text()
    DOC.write_text(BLOCK.sub(lambda m: m.group(1) + table() + m.group(3), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
