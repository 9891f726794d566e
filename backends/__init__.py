"""Backends: printers and emitters that turn IR into text, JSON and pictures."""
