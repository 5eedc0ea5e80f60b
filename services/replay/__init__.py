"""Replay for auditors: rebuild every projection from offset 0 and compare with what is live."""
