"""What the endpoints share in reading a request, before anything is planned: the body as strict
JSON and its bounds (``validation``), the chat request every planned endpoint is viewed as
(``chat_request``, ``chat_view``) and Anthropic's error shapes (``anthropic_errors``)."""
