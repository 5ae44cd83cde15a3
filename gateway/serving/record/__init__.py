"""What a request leaves behind: its ``Outcome``, its log row, its access line, what learning may
know of it (``Served``), its spans. Shared by every endpoint."""
