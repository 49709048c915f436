"""The manual (Markdown pages for MkDocs) and the generator of its reference pages."""
