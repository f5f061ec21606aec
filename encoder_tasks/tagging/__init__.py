"""Token tagging building blocks: alignment and windows, decoding, metrics, raw text."""
