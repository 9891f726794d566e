"""Passes over the IR, the pass registry and the pipeline."""
