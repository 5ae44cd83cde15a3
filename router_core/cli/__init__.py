"""router_core's command line: ``tollgate train`` (``train``); ``tollgate eval`` is
router_core.evaluation.cli. The encoder option both share is router_core.encoders.cli_option."""
