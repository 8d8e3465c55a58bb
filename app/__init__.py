"""Offline document-OCR service on Ray Serve.

Rooms, one per responsibility:
  config.py      the typed settings (application-builder args) and batch knobs
  errors.py      the public error taxonomy and its HTTP mapping
  schemas.py     what travels between deployments
  documents.py   decoding images and rasterising PDFs (pure functions)
  sandbox/       decoder processes with memory and time limits (what preprocess runs documents in)
  preprocess.py  the CPU preprocessing deployment
  engines/       OCR engines behind one protocol
  ocr_model.py   the batched OCR deployment (GPU when the cluster has one)
  layout.py      reading order and Markdown (pure functions)
  postprocess.py the CPU postprocessing deployment
  uploads.py     bounded request-body reading and multipart parsing
  ingress.py     the HTTP ingress deployment
  retry.py       sending a page again when its replica died
  proxy_guard.py a middleware in Serve's HTTP proxy that drops headers the proxy cannot decode
  builder.py     the application builder that serve_config.yaml points at
"""

__version__ = "0.1.0"
