"""Bridges to other compression frameworks, each an optional extra.

Importing this package imports none of them: ``swapprune.integrations.llmcompressor``
needs ``pip install 'swapprune[llmcompressor]'``.
"""
