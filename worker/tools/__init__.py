"""The operator's tools beside the command line: `worker check` and `gateway check` (`check.py`: is the cluster
ready for the settings, asked with requests that change nothing) and `worker inspect` (`inspect.py`, as text by
`inspect_text.py`: what a group holds, read back changing nothing). The live path imports none of them."""
