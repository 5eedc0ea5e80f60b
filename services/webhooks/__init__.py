"""Webhooks: the tenants' subscriptions to job events and their signed delivery."""
