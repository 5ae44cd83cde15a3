"""``python -m bench.serving.overhead``: see the package docstring."""

from bench.serving.overhead.run import main

main()
