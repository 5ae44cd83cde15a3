"""What a request may cost and holds against its tenant's budget: admission, the hold from
reservation to settling, the learned bound factors, the fee parameters. Shared by every endpoint."""
