"""Model families of the `vlm` engine: how to build a batch's inputs and read its outputs.

Each family builds exactly the inputs its model's own processor documents (tests/test_vlm_reference.py
holds every family to the processor's output and to `model.generate` on it), knows its input
budget (the pixels worth sending) and whether fp16 is safe for it.
Adding a family is one small class here plus its model_type in `FAMILIES`.
Every load is `local_files_only` from the model directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from PIL import Image

from app.engines.base import InputBudget


class Family:
    name = "base"
    default_prompt = ""
    # The most pixels worth sending by default: what the model's recipe reads a page at.
    default_budget = InputBudget(max_side=2048, max_pixels=2048 * 2048)
    # fp16 overflows in some families' activations (Qwen2/2.5-VL answer "!!!!"); only bf16 or fp32 there.
    fp16_safe = False

    def __init__(self, model_dir: Path, trust_remote_code: bool, max_pixels: Optional[int] = None):
        self.model_dir = model_dir
        self.trust_remote_code = trust_remote_code
        self.budget = budget_for(type(self), max_pixels)
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
    # The processor resizes every page to its 1024 x 1024 input: more pixels are transfer for nothing.
    default_budget = InputBudget(max_side=1024, max_pixels=1024 * 1024)
    fp16_safe = True  # GOT-OCR2's own release runs in fp16
    _system = "system\nYou should follow the instructions carefully and explain your answers in detail."

    def load(self) -> None:
        from transformers import AutoProcessor

        self.processor = AutoProcessor.from_pretrained(
            self.model_dir, local_files_only=True, trust_remote_code=self.trust_remote_code
        )
        self.tokenizer = self.processor.tokenizer
        self._left_padded(self.tokenizer)

    def inputs(self, images: list[Image.Image], prompt: str) -> dict:
        # The processor's own conversation, character for character (its `format=True` query is our
        # default prompt, after the space that follows its empty box slot), with the configured
        # instruction in place of that fixed query.
        text = (
            f"<|im_start|>{self._system}<|im_end|><|im_start|>user\n<img><imgpad></img>\n"
            f" {prompt}<|im_end|><|im_start|>assistant\n"
        )
        return dict(self.processor(images=images, text=[text] * len(images), return_tensors="pt", padding=True))


class QwenVL(Family):
    """Qwen2-VL and Qwen2.5-VL chat models (the base of MonkeyOCR's recogniser, olmOCR and dots.ocr).

    Their processor class needs a video processor, hence torchvision, so the tokenizer and
    image processor are loaded apart and the processor's work is done here: `<|image_pad|>`
    expanded to the image's tokens, and `mm_token_type_ids` marking them. Without the latter
    the model gives image tokens plain 1-D positions instead of their 3-D (M-RoPE) ones, and
    reads every page worse, silently.
    """

    name = "qwen2_5_vl"
    default_prompt = "Read all the text in this image. Write it as Markdown, in reading order."
    # Qwen2.5-VL's recipe: max_pixels = 1280 * 28 * 28, about 1.0 MP and 1,280 visual tokens.
    # The processor's own default (12.8 MP) turns an A4 page into about 3,800 tokens.
    default_budget = InputBudget(max_side=2048, max_pixels=1280 * 28 * 28)

    def load(self) -> None:
        from transformers import AutoTokenizer
        # From its module: in transformers 5.17 the top-level name is a placeholder without torchvision.
        from transformers.models.auto.image_processing_auto import AutoImageProcessor

        options = {"local_files_only": True, "trust_remote_code": self.trust_remote_code}
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, **options)
        self.image_processor = AutoImageProcessor.from_pretrained(self.model_dir, **options)
        self._left_padded(self.tokenizer)
        self.image_token_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        # The model directory's own cap stays in force; the budget can only lower it.
        size = dict(self.image_processor.size)
        size["longest_edge"] = min(size["longest_edge"], self.budget.max_pixels)
        self.size = size

    def inputs(self, images: list[Image.Image], prompt: str) -> dict:
        vision = self.image_processor(images=images, size=self.size, return_tensors="pt")
        merge = getattr(self.image_processor, "merge_size", 2)
        message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        template = self.tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
        texts = [
            template.replace("<|image_pad|>", "<|image_pad|>" * int(grid.prod() // merge**2), 1)
            for grid in vision["image_grid_thw"]
        ]
        encoded = self.tokenizer(texts, padding=True, return_tensors="pt")
        # 1 marks an image token, 0 text: what the processor returns (create_mm_token_type_ids).
        token_types = (encoded["input_ids"] == self.image_token_id).to(encoded["input_ids"].dtype)
        return {**encoded, "mm_token_type_ids": token_types,
                "pixel_values": vision["pixel_values"], "image_grid_thw": vision["image_grid_thw"]}


FAMILIES = {"got_ocr2": GotOcr2, "qwen2_vl": QwenVL, "qwen2_5_vl": QwenVL}


def budget_for(family: Optional[type], max_pixels: Optional[int]) -> InputBudget:
    """The pages' budget: `vlm.max_pixels` where set, else the family's default. An unknown family
    (a node without the model directory) gets the largest default, and the engine's processor,
    which knows the family, enforces its own."""
    if family is None:
        default = max((f.default_budget for f in FAMILIES.values()), key=lambda b: b.max_pixels)
    else:
        default = family.default_budget
    if max_pixels is None:
        return default
    return InputBudget(max_side=default.max_side, max_pixels=max_pixels)


def family_name(model_dir: Optional[Path], name: Optional[str]) -> Optional[str]:
    """The configured family, else config.json's model_type; None where neither can be read."""
    if name is not None:
        return name
    try:
        return json.loads((Path(model_dir) / "config.json").read_text()).get("model_type")
    except (OSError, TypeError, ValueError):
        return None


def family_for(model_dir: Path, name: Optional[str], trust_remote_code: bool,
               max_pixels: Optional[int] = None) -> Family:
    name = family_name(model_dir, name)
    if name not in FAMILIES:
        raise ValueError(f"model_type '{name}' in {model_dir} is not a supported family: {sorted(FAMILIES)}")
    return FAMILIES[name](model_dir, trust_remote_code, max_pixels)


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


def checked_model_dir(model_dir: str, verify_mode: str) -> Path:
    """The model directory, refused with what it lacks, and its weights checked against weights.sha256
    once per node (`verify_weights`): what every VLM engine does before it builds anything."""
    import logging

    from app.ops.weights import verify_once_per_node

    logger = logging.getLogger("ray.serve")
    path = Path(model_dir)
    missing = missing_model_files(path)
    if missing:
        raise FileNotFoundError(f"model directory {path} is incomplete; missing: {', '.join(missing)}")
    if verify_once_per_node(path, verify_mode):
        logger.info("weights in %s verified (%s)", path, verify_mode)
    elif verify_mode != "off":
        logger.info("weights in %s already verified on this node in this state", path)
    return path
