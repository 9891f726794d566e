"""The layer-detection strategies every command that finds layers offers (``--strategy``);
kept apart from ``trace_layers`` so that building a command line imports no numpy."""

STRATEGIES = ("auto", "ground-truth", "boundary", "motif")
HELP = ("how layers are found (default auto: module spans in the forward passes they cover, "
        "the motif or boundary result, whichever is more confident, in the others)")
