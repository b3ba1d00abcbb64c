"""laneboard's front ends: the command line (`cli`) and the Textual app.

Only the app imports textual; the CLI imports it lazily, so `laneboard exec` and other commands
start without the TUI stack.
"""
