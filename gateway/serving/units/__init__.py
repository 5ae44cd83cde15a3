"""The passthroughs billed by the unit, not the token (images, speech, transcription, moderation,
rerank): their prices, their shared frame and their handlers."""
