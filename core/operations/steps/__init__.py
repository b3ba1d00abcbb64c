"""Steps that several operations share, each in a module of its own.

A step module imports adapters, the domain and other steps, never an operation (the modules one
level up): an operation reads as its own facts, decision and effects, and reaches what it shares
with others through here. import-linter keeps it so (pyproject.toml).
"""
