"""Lark grammars for the texts layerc reads, and the readers that build IR from them."""
