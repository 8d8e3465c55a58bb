"""Build tiny random-weight VLM checkpoints on local disk, for tests and CPU benchmarks.

    python -m app.tools.tiny_vlm --family got_ocr2 --out /tmp/tiny-got
    python -m app.tools.tiny_vlm --family qwen2_5_vl --out /tmp/tiny-qwen

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on a few
sentences, the weights are random. The checkpoints exercise the real transformers
classes (load, processor, batched generate), not OCR quality. `--size full` builds
GOT-OCR2 (about 580M parameters) or Qwen2.5-VL-3B at their real dimensions, for speed
measurements (on a GPU where there is one: initialising them on a CPU takes minutes).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_CORPUS = [
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "INVOICE TOTAL AMOUNT CASH CHANGE GST TAX RM EUR USD",
    "# Heading\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- item one\n- item two",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
]
# Large random weights: with the defaults (1e-10 for GOT's vision tower, 0.02 elsewhere)
# every page generates the same newlines, and no test could tell one page from another.
_INIT = 0.5
GOT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<imgpad>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>"]
# Qwen2.5-VL-3B-Instruct's published config.json: the full-size random checkpoint for GPU benchmarks.
QWEN_3B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
                  "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                  "fullatt_block_indexes": [7, 15, 23, 31]}
QWEN_3B_TEXT = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 128000,
                "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                "tie_word_embeddings": True}


def train_tokenizer(special_tokens: list[str], vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS * 20, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )


def end_tokens(tokenizer) -> list[int]:
    """<|im_end|> and <|endoftext|>: the published checkpoints' generation_config lists both
    (Qwen2.5-VL: [151645, 151643]), so `model.generate` stops at either, as the engine does."""
    return [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]


def build_got_ocr2(out: Path, size: str = "tiny", seed: int = 0) -> Path:
    import torch
    from transformers import GotOcr2Config, GotOcr2ForConditionalGeneration, GotOcr2ImageProcessorPil, GotOcr2Processor

    torch.manual_seed(seed)
    tokenizer = train_tokenizer(GOT_SPECIALS)
    if size == "full":
        image_size, patch, vision, text = 1024, 16, {}, {
            "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24,
            "num_attention_heads": 16, "num_key_value_heads": 16,
            "vocab_size": 151860,  # the real LM head's size; ids past the toy tokenizer decode to nothing
        }
    else:  # 256 px at patch 4 gives 64x64 patches, reduced 16x by the neck: 256 image tokens
        image_size, patch = 256, 4
        vision = {"hidden_size": 32, "output_channels": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                  "mlp_dim": 64, "window_size": 8, "global_attn_indexes": [],  # windowed only: cheap
                  "initializer_range": _INIT}
        text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": _INIT}
    config = GotOcr2Config(
        vision_config={"image_size": image_size, "patch_size": patch, **vision},
        text_config={"vocab_size": len(tokenizer), "max_position_embeddings": 2048,
                     "bos_token_id": tokenizer.convert_tokens_to_ids("<|im_start|>"),
                     "eos_token_id": tokenizer.eos_token_id, **text},
        image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"),
        image_seq_length=256,
    )
    device = "cuda" if size == "full" and torch.cuda.is_available() else "cpu"
    with torch.device(device):  # initialising 580M parameters is minutes on a CPU, seconds on a GPU
        model = GotOcr2ForConditionalGeneration(config).eval()
    if size == "full":
        model = model.to(torch.bfloat16)  # half the bytes to write and read; fp32 runs upcast on load
    model.generation_config.eos_token_id = end_tokens(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    image_processor = GotOcr2ImageProcessorPil(size={"height": image_size, "width": image_size})
    processor = GotOcr2Processor(image_processor=image_processor, tokenizer=tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_qwen2_5_vl(out: Path, size: str = "tiny", seed: int = 0) -> Path:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessorPil

    torch.manual_seed(seed)
    tokenizer = train_tokenizer(QWEN_SPECIALS)
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    ids = tokenizer.convert_tokens_to_ids
    if size == "full":  # ids past the toy tokenizer's decode to nothing
        vision, text, max_pixels = dict(QWEN_3B_VISION), dict(QWEN_3B_TEXT), 12845056  # the published processor's
    else:
        vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "initializer_range": _INIT,
                  "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                  "window_size": 56, "fullatt_block_indexes": [1]}
        text = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                # Head size 32 (2 heads of 32, 1 KV head): vLLM's CPU attention takes 32, 64, 80, ..., not 16.
                "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 4096,
                "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}, "initializer_range": _INIT}
        max_pixels = 224 * 224
    config = Qwen2_5_VLConfig(
        vision_config=vision,
        text_config={**text, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": ids("<|im_start|>")},
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=text.get("tie_word_embeddings", False),
    )
    device = "cuda" if size == "full" and torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).eval()
    if size == "full":
        model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = end_tokens(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=max_pixels, patch_size=14,
                                               merge_size=2, temporal_patch_size=2)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
    return out


BUILDERS = {"got_ocr2": build_got_ocr2, "qwen2_5_vl": build_qwen2_5_vl}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=sorted(BUILDERS), default="got_ocr2")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=["tiny", "full"], default="tiny",
                        help="full: the real dimensions (GOT-OCR2 about 580M parameters, Qwen2.5-VL-3B)")
    options = parser.parse_args()
    BUILDERS[options.family](options.out, size=options.size)
    print(f"wrote {options.family} ({options.size}) to {options.out}")


if __name__ == "__main__":
    main()
