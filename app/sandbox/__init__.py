"""Decoding in a sandbox: documents are sniffed, counted, decoded and rasterised in worker processes.

A hostile file can make Pillow or PDFium eat memory or time without bound. Here it can
only take down one worker process, which has an address-space cap
(`limits.decode_memory_mb`) and a wall-clock limit per page (`limits.page_render_timeout_s`);
a worker past a limit is killed and replaced, and the request gets a 422 naming the limit.
Each document holds one worker, so documents decode in parallel, one per process.

  protocol.py  the frames both sides speak: a JSON header and raw bytes, never pickle
  worker.py    the child process: `python -m app.sandbox.worker`, pure decoding (app.sandbox.documents)
  process.py   one decoder process seen from the parent: its pipes, frames under a deadline
  pool.py      the parent side: `DecodeSandbox`, the pool a Preprocessor replica owns; reconfigure()
               retires one and starts another, and the documents in flight finish in the old one
"""

from app.sandbox.pool import DecodeSandbox, SandboxRetired
from app.sandbox.protocol import RenderedPage

__all__ = ["DecodeSandbox", "RenderedPage", "SandboxRetired"]
