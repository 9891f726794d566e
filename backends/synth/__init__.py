"""Synthetic inputs with their ground truth: AutoDeploy dumps, Kineto traces, Nsight Systems
exports, memory-planner dumps, kernel replays and tiny Hugging Face exports (the `gen-*` and
`export-hf` commands are their command lines)."""
