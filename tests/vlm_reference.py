"""The reference side of tests/test_vlm_reference.py: what each model's own processor and
`model.generate` make of a batch of pages, built without any of the engine's code.

Run as a module it builds tiny checkpoints with the transformers on its path, compares the
`vlm` engine with this reference, and prints one JSON line: the test runs it that way under
each supported transformers version (.venv/compat/transformers-*, made by `make install-test`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MAX_NEW_TOKENS = 20  # under the loop guard's first look (16 tokens apart): it cannot cut a row here


def processor_for(model_dir: Path, family: str):
    """The model's own processor class. Qwen's needs a video processor (hence torchvision, not
    installable here); only its class check is skipped, for a video processor never used on images."""
    from transformers import AutoProcessor, AutoTokenizer, ProcessorMixin, Qwen2_5_VLProcessor
    from transformers.models.auto.image_processing_auto import AutoImageProcessor  # 5.17: not at the top level

    if family == "got_ocr2":
        return AutoProcessor.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tokenizer.padding_side = "left"  # batched generation; transformers 5 does not save it
    image_processor = AutoImageProcessor.from_pretrained(model_dir, local_files_only=True)
    check = ProcessorMixin.check_argument_for_proper_class

    def skip_absent_video_processor(self, name, value):
        return None if name == "video_processor" and value is None else check(self, name, value)

    with mock.patch.object(ProcessorMixin, "check_argument_for_proper_class", skip_absent_video_processor):
        return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                                   chat_template=tokenizer.chat_template)


def reference_inputs(processor, family: str, images: list, prompt: str) -> dict:
    """As each model card documents: GOT-OCR2 `processor(images, format=True)`; Qwen2.5-VL the chat
    template with an image and the instruction, then `processor(images=..., text=...)`."""
    if family == "got_ocr2":
        return dict(processor(images, format=True, return_tensors="pt"))
    message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
    return dict(processor(images=images, text=[text] * len(images), padding=True, return_tensors="pt"))


def reference_ids(model, inputs: dict, max_new_tokens: int) -> list[list[int]]:
    """Greedy `model.generate` with the checkpoint's own generation config; each row up to and
    including its first end token."""
    import torch

    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    stops = set(model.generation_config.eos_token_id)
    rows = output[:, inputs["input_ids"].shape[1]:].tolist()
    return [row[:next((i + 1 for i, t in enumerate(row) if t in stops), len(row))] for row in rows]


def reference_pages() -> list:
    """Four pages of different sizes and texts: Qwen gives each a different number of image
    tokens, so a batch is left-padded."""
    from app.synthetic import render_text_page

    specs = [("alpha", 800, 36), ("beta beta", 420, 24), ("gamma 42 delta", 1300, 48), ("x", 260, 30)]
    return [render_text_page([text], width=width, font_size=size).convert("RGB") for text, width, size in specs]


def compare(model_dir: Path, family: str) -> dict:
    """Inputs and tokens of the engine against the reference, batched and page by page."""
    import torch
    from transformers import AutoModelForImageTextToText

    from app.config import Settings
    from app.engines import build_engine

    engine = build_engine(Settings(engine="vlm", model_dir=str(model_dir),
                                   vlm={"max_new_tokens": MAX_NEW_TOKENS, "verify_weights": "off"}), threads=2)
    engine.load()
    processor = processor_for(model_dir, family)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, local_files_only=True).eval()
    pages = reference_pages()
    prompt = engine.info.details["prompt"]
    expected = reference_inputs(processor, family, pages, prompt)
    given = engine.model_inputs(pages)
    inputs = {key: key in given and given[key].shape == value.shape and bool(torch.equal(given[key].to(value.dtype), value))
              for key, value in expected.items()}
    batched = {"engine": engine.generated_ids(pages), "reference": reference_ids(model, expected, MAX_NEW_TOKENS)}
    single = {"engine": [engine.generated_ids([page])[0] for page in pages],
              "reference": [reference_ids(model, reference_inputs(processor, family, [page], prompt), MAX_NEW_TOKENS)[0]
                            for page in pages]}
    return {"inputs": inputs, "batched": batched, "single": single}


def main() -> int:
    import transformers

    from app.tools.tiny_vlm import BUILDERS

    root = Path(tempfile.mkdtemp(prefix="vlm-reference-"))
    report = {"transformers": transformers.__version__,
              "families": {family: compare(build(root / family), family) for family, build in sorted(BUILDERS.items())}}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
