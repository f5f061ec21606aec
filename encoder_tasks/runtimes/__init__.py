"""Inference backends that stand in for the torch encoder (placeholder of the OpenVINO branch:
the backends branch owns this file; take its version when merging)."""
