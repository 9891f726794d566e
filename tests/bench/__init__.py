"""`make bench`: speed figures measured side by side, outside the installed package."""
