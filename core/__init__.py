"""laneboard's domain: models, decisions, the ledger, git and the application service.

`core` never imports textual, rich, libtmux or watchfiles (import-linter enforces it). Its pure
modules (`models`, `names`, `lifecycle`, `lanes`, `cleanup`) take facts and return decisions; they
do no I/O, so they are tested without a disk.
"""
