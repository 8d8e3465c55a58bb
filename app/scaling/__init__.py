"""Autoscaling policies of the OCR deployment (pure)."""
