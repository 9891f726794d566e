"""Drivers, as in LLVM/MLIR: the `layerc` command and the tools it runs."""
