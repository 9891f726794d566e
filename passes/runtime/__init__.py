"""Running the graph IR with PyTorch (an interpreter of the IR, neither a pass nor an emitter):
what ``layerc profile`` measures. torch and transformers are imported on use."""
