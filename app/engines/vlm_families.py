"""Model families of the `vlm` engine: how to build a batch's inputs and read its outputs.

Adding a family is one small class here plus its model_type in `FAMILIES`.
Every load is `local_files_only` from the model directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from PIL import Image


class Family:
    name = "base"
    default_prompt = ""

    def __init__(self, model_dir: Path, trust_remote_code: bool):
        self.model_dir = model_dir
        self.trust_remote_code = trust_remote_code
        self.tokenizer = None

    def load(self) -> None:
        raise NotImplementedError

    def inputs(self, images: list[Image.Image], prompt: str) -> dict:
        raise NotImplementedError

    @property
    def eos_token_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        for token in ("<|im_end|>", "<|endoftext|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        return {i for i in ids if i is not None}

    def decode(self, tokens: list[int]) -> tuple[str, str]:
        """(text up to the first end token, 'stop' if there was one else 'length')."""
        stops = self.eos_token_ids
        for position, token in enumerate(tokens):
            if token in stops:
                return self.tokenizer.decode(tokens[:position], skip_special_tokens=True), "stop"
        return self.tokenizer.decode(tokens, skip_special_tokens=True), "length"

    def _left_padded(self, tokenizer) -> None:
        # transformers 5 does not save padding_side; batched generation needs it on the left.
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token


class GotOcr2(Family):
    name = "got_ocr2"
    default_prompt = "OCR with format: "
    _system = "system\nYou should follow the instructions carefully and explain your answers in detail."

    def load(self) -> None:
        from transformers import AutoProcessor

        self.processor = AutoProcessor.from_pretrained(
            self.model_dir, local_files_only=True, trust_remote_code=self.trust_remote_code
        )
        self.tokenizer = self.processor.tokenizer
        self._left_padded(self.tokenizer)

    def inputs(self, images: list[Image.Image], prompt: str) -> dict:
        # The processor's own conversation, with our instruction in place of its fixed query.
        text = (
            f"<|im_start|>{self._system}<|im_end|><|im_start|>user\n<img><imgpad></img>\n"
            f"{prompt}<|im_end|><|im_start|>assistant\n"
        )
        return dict(self.processor(images=images, text=[text] * len(images), return_tensors="pt", padding=True))


class QwenVL(Family):
    """Qwen2-VL and Qwen2.5-VL chat models (the base of MonkeyOCR's recogniser and dots.ocr).

    Their processor class needs a video processor, hence torchvision, so the tokenizer and
    image processor are loaded apart and `<|image_pad|>` is expanded here.
    """

    name = "qwen2_5_vl"
    default_prompt = "Read all the text in this image. Write it as Markdown, in reading order."

    def load(self) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer

        options = {"local_files_only": True, "trust_remote_code": self.trust_remote_code}
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, **options)
        self.image_processor = AutoImageProcessor.from_pretrained(self.model_dir, **options)
        self._left_padded(self.tokenizer)

    def inputs(self, images: list[Image.Image], prompt: str) -> dict:
        vision = self.image_processor(images=images, return_tensors="pt")
        merge = getattr(self.image_processor, "merge_size", 2)
        message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        template = self.tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
        texts = [
            template.replace("<|image_pad|>", "<|image_pad|>" * int(grid.prod() // merge**2), 1)
            for grid in vision["image_grid_thw"]
        ]
        encoded = self.tokenizer(texts, padding=True, return_tensors="pt")
        return {**encoded, "pixel_values": vision["pixel_values"], "image_grid_thw": vision["image_grid_thw"]}


FAMILIES = {"got_ocr2": GotOcr2, "qwen2_vl": QwenVL, "qwen2_5_vl": QwenVL}


def family_for(model_dir: Path, name: Optional[str], trust_remote_code: bool) -> Family:
    if name is None:
        name = json.loads((model_dir / "config.json").read_text()).get("model_type")
    if name not in FAMILIES:
        raise ValueError(f"model_type '{name}' in {model_dir} is not a supported family: {sorted(FAMILIES)}")
    return FAMILIES[name](model_dir, trust_remote_code)


def missing_model_files(model_dir: Path) -> list[str]:
    """What a loadable model directory lacks, by name; empty when complete."""
    if not model_dir.is_dir():
        return [f"the directory itself ({model_dir})"]
    missing = []
    if not (model_dir / "config.json").is_file():
        missing.append("config.json")
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing += [f"weight shard {s}" for s in shards if not (model_dir / s).is_file()]
    elif not list(model_dir.glob("*.safetensors")) and not list(model_dir.glob("pytorch_model*.bin")):
        missing.append("weights (*.safetensors or pytorch_model*.bin)")
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        missing.append("tokenizer (tokenizer.json)")
    if not any((model_dir / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
        missing.append("image processor config (preprocessor_config.json)")
    return missing
